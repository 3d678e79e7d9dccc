"""A Cloud Storage emulator for tests: gcp-storage-emulator in its own process, in memory, on
127.0.0.1, and the environment that points every Google client a run uses at it.

A run on gs:// talks to Cloud Storage through three clients: gcsfs (etils.epath: every file but
the arrays), tensorstore's gcs driver (orbax's checkpoint arrays) and google-cloud-storage
(orbax deleting old steps). `offline_env` sends all three to the emulator and keeps them, and
google-auth under them, from looking for credentials anywhere (a metadata server, a cloud).
The test reads what the run wrote through the emulator's JSON API (`names`, `read`), not
through the code under test.

gcp-storage-emulator 2026.7.19 serves what gcsfs and google-cloud-storage ask, but not two
things of the JSON API that tensorstore relies on (its own mock, gcs_mock.cc, has them): the
`x-goog-generation` header of a download (without it tensorstore fails with "Malformed
StorageGeneration") and the generation preconditions (ifGenerationMatch, ifGenerationNotMatch)
with which OCDBT updates its manifest. Run as a script, this file serves the emulator with both
added (`_with_generations`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

BUCKET = "papers-jax-test"


def offline_env(endpoint: str) -> dict[str, str]:
    """Environment variables for a process that reads and writes gs:// at `endpoint`."""
    return {
        "STORAGE_EMULATOR_HOST": endpoint,            # gcsfs and google-cloud-storage
        "TENSORSTORE_GCS_HTTP_URL": endpoint,         # tensorstore's gcs driver
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",  # tensorstore: this token, no lookup
        "FSSPEC_GS_TOKEN": "anon",                    # gcsfs: no credentials
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",  # gcsfs: no bucket-layout API call
        # google-auth: never ask a metadata server (a loopback port nothing listens on)
        "NO_GCE_CHECK": "True", "GCE_METADATA_HOST": "127.0.0.1:9",
        "GCE_METADATA_IP": "127.0.0.1:9",
    }


def _with_generations() -> None:
    """Adds the download's generation headers and the generation preconditions to the
    emulator's object handlers (GET, download, upload, delete), as Cloud Storage answers them:
    304 for a read whose ifGenerationNotMatch matches, 412 for any other failed condition."""
    from http import HTTPStatus

    from gcp_storage_emulator import server
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects

    def generation(request, storage) -> int:
        """The object's live generation; 0 when there is none (as ifGenerationMatch=0 means)."""
        name = request.params.get("object_id") or request.query.get("name", [None])[0]
        try:
            return int(storage.get_file_obj(request.params["bucket_name"], name)["generation"])
        except (NotFound, TypeError):
            return 0

    def guarded(handler, read: bool):
        def guarded_handler(request, response, storage, *args, **kwargs):
            current = generation(request, storage)
            match = request.query.get("ifGenerationMatch")
            not_match = request.query.get("ifGenerationNotMatch")
            if match and int(match[0]) != current:
                response.status = HTTPStatus.PRECONDITION_FAILED
            elif not_match and current and int(not_match[0]) == current:
                response.status = HTTPStatus.NOT_MODIFIED if read else \
                    HTTPStatus.PRECONDITION_FAILED
            else:
                handler(request, response, storage, *args, **kwargs)
                if read and response.status == HTTPStatus.OK and current:
                    response["x-goog-generation"] = str(current)
                    response["x-goog-metageneration"] = "1"
        return guarded_handler

    replaced = {objects.download: guarded(objects.download, read=True),
                objects.get: guarded(objects.get, read=True),
                objects.insert: guarded(objects.insert, read=False),
                objects.delete: guarded(objects.delete, read=False)}
    for _, handlers in server.HANDLERS:
        for method, handler in handlers.items():
            handlers[method] = replaced.get(handler, handler)
    objects.download = replaced[objects.download]  # objects.get calls it for alt=media
    objects.insert = replaced[objects.insert]      # the router's fallback for uploads


class Emulator:
    """The emulator process, serving one bucket (BUCKET); stop() ends it."""

    def __init__(self, log: Path):
        import portpicker

        port = portpicker.pick_unused_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self._log = open(log, "w")
        self._process = subprocess.Popen([sys.executable, __file__, str(port)],
                                         stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/", timeout=5) as answer:
                    if answer.read() == b"OK":
                        break
            except OSError:
                if self._process.poll() is not None or time.time() > deadline:
                    self.stop()
                    raise RuntimeError(f"the storage emulator did not start; see {log}")
                time.sleep(0.2)
        self.env = offline_env(self.endpoint)

    def _get(self, path: str, **query) -> bytes:
        url = f"{self.endpoint}{path}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=60) as answer:
            return answer.read()

    def names(self, prefix: str) -> list[str]:
        """The names of the objects under `prefix` (e.g. 'run/checkpoints/'), sorted."""
        names, token = [], None
        while True:
            query = {"prefix": prefix, **({"pageToken": token} if token else {})}
            page = json.loads(self._get(f"/storage/v1/b/{BUCKET}/o", **query))
            names += [item["name"] for item in page.get("items", [])]
            token = page.get("nextPageToken")
            if not token:
                return sorted(names)

    def read(self, name: str) -> bytes:
        return self._get(f"/download/storage/v1/b/{BUCKET}/o/{urllib.parse.quote(name, safe='')}",
                         alt="media")

    def write(self, name: str, data: bytes) -> None:
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        request = urllib.request.Request(f"{self.endpoint}/upload/storage/v1/b/{BUCKET}/o?{query}",
                                         data=data, method="POST")
        with urllib.request.urlopen(request, timeout=60) as answer:
            answer.read()

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=30)
        self._log.close()


if __name__ == "__main__":
    from gcp_storage_emulator.server import create_server

    _with_generations()
    create_server("127.0.0.1", int(sys.argv[1]), in_memory=True, default_bucket=BUCKET).run()
