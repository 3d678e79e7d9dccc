"""On a pod every process lists a gs:// checkpoints folder through its own gcsfs client. When
process 0 sets a damaged step aside, the others must no longer list that step: with a cached
listing their orbax would keep it, skip saving that step again, and leave process 0 alone in a
collective save (a hang). train/storage.py turns gcsfs's listings cache off, and
Checkpointer._set_aside makes every process forget its listings after the move.

The same listing decides which steps the encoder diagnosis offers (train/encoder_diagnosis.py):
only committed ones, as orbax lists them.

Process 1 is a real process on the Cloud Storage emulator (tests/gcs_emulator.py); this one
plays process 0: it answers process 1's barriers and moves the step through another client, the
emulator's JSON API.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import urllib.parse
import urllib.request

import pytest
from conftest import REPO
from gcs_emulator import BUCKET, Emulator

PROCESS_1 = """
import contextlib
import sys
import types

import fsspec.config
from etils import epath

from train import checkpointing

folder, mode = sys.argv[1], sys.argv[2]
if mode == "cached":  # a gcsfs client made before train/storage.py's default: it caches
    fsspec.config.conf["gs"]["use_listings_cache"] = True
synchronise = checkpointing.ocp.multihost.sync_global_processes


def barrier(name, *args, **kwargs):  # process 0 (the test) moves the step at these
    if not name.startswith("checkpoint_"):
        return synchronise(name, *args, **kwargs)
    print(name, flush=True)
    sys.stdin.readline()


def judged():  # what find_damage lists of step 30
    return sorted(p.name for p in (epath.Path(folder) / "30").iterdir())


if mode == "listing":
    print("before", checkpointing.checkpoint_steps(folder), judged(), flush=True)
    barrier("checkpoint_moved")
    print("after", checkpointing.checkpoint_steps(folder), flush=True)
else:
    checkpointer = checkpointing.Checkpointer(folder, save_every=3, keep=3)
    print("before", checkpointer.all_steps(), judged(), flush=True)

    @contextlib.contextmanager
    def together(what, kinds=()):  # process 0 (the test) moves the step as the block ends
        yield
        barrier("checkpoint_set_aside_0")

    checkpointing.together = together
    checkpointing.jax = types.SimpleNamespace(process_index=lambda: 1)
    checkpointer._set_aside(30)
    print("after", checkpointer.all_steps(), flush=True)
"""


DIAGNOSIS = """
import sys

from train import encoder_diagnosis


def chosen(spec, saved):  # the steps the diagnosis would choose among; the run is not read
    print(saved, flush=True)
    sys.exit(0)


encoder_diagnosis._config = lambda workdir: None
encoder_diagnosis._steps = chosen
encoder_diagnosis.diagnose_run(sys.argv[1], steps="latest")
"""


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    emulator = Emulator(tmp_path_factory.mktemp("gcs") / "emulator.log")
    yield emulator
    emulator.stop()


def commit_steps(gcs: Emulator, run: str) -> None:
    """Steps 27 and 30 of `run`, committed (their files as orbax lays them out on gs://)."""
    for step in (27, 30):
        for name in ("commit_success.txt", "state/commit_success.txt", "state/_METADATA",
                     "data/process_0-of-1.json"):
            gcs.write(f"{run}/checkpoints/{step}/{name}", b"{}")


def move_by_another_client(gcs: Emulator, source: str, target: str) -> None:
    """What process 0's storage.move_folder does, through the JSON API: copy, then delete."""
    names = gcs.names(f"{source}/")
    for name in names:
        gcs.write(target + name.removeprefix(source), gcs.read(name))
    for name in sorted(names, key=lambda n: not n.endswith("/commit_success.txt")):
        url = f"{gcs.endpoint}/storage/v1/b/{BUCKET}/o/{urllib.parse.quote(name, safe='')}"
        with urllib.request.urlopen(urllib.request.Request(url, method="DELETE")) as answer:
            answer.read()


def process_1(gcs: Emulator, tmp_path, run: str, mode: str) -> tuple[str, str]:
    """Runs PROCESS_1 on gs://BUCKET/run/checkpoints, moving step 30 aside when it waits at
    its barriers; its 'before' and 'after' lines."""
    env = dict(os.environ, **gcs.env, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    log = tmp_path / "process_1.log"
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", PROCESS_1, f"gs://{BUCKET}/{run}/checkpoints", mode],
            cwd=tmp_path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=stderr, text=True)
        lines = {}
        deadline = threading.Timer(300, process.kill)  # a hung process 1 fails, not hangs
        deadline.start()
        try:
            for line in process.stdout:
                word = line.split()[0]
                lines[word] = line.strip()
                if word == "checkpoint_moved" or word.startswith("checkpoint_set_aside_"):
                    move_by_another_client(gcs, f"{run}/checkpoints/30",
                                           f"{run}/checkpoints/30.corrupt-1")
                if word.startswith("checkpoint_"):
                    process.stdin.write("go\n")
                    process.stdin.flush()
            assert process.wait(timeout=120) == 0, log.read_text()[-3000:]
        finally:
            deadline.cancel()
            process.kill()
    assert not gcs.names(f"{run}/checkpoints/30/"), f"not moved; process 1 printed {lines}"
    return lines["before"], lines["after"]


def test_a_gs_listing_sees_a_step_that_another_process_set_aside(gcs, tmp_path):
    commit_steps(gcs, "listing")
    before, after = process_1(gcs, tmp_path, "listing", "listing")
    assert before == "before [27, 30] ['commit_success.txt', 'data', 'state']"
    assert after == "after [27]"


def test_every_process_lists_afresh_after_a_step_is_set_aside(gcs, tmp_path):
    commit_steps(gcs, "set_aside")
    before, after = process_1(gcs, tmp_path, "set_aside", "cached")
    assert before == "before [27, 30] ['commit_success.txt', 'data', 'state']"
    assert after == "after [27]"  # so save(30) saves on every process, as on process 0


def test_the_encoder_diagnosis_chooses_among_committed_gs_steps_only(gcs, tmp_path):
    """On gs:// orbax writes a step straight into its folder and marks it saved whole with
    commit_success.txt: step 33, still being written, is not one to read."""
    commit_steps(gcs, "bert")
    gcs.write("bert/checkpoints/33/state/_METADATA", b"{}")
    env = dict(os.environ, **gcs.env, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-c", DIAGNOSIS, f"gs://{BUCKET}/bert"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == "[27, 30]\n"
