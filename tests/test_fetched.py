"""data/fetched.py: which fetched datasets are in the data root, and the check every run makes
with it (train/tasks get_task) before doing any work."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from data import fetched, paths
from data.errors import DataError
from data.testing import install_brown_fixture
from train.config import load_config_file


def test_every_missing_dataset_is_named_with_one_command(tmp_path, monkeypatch):
    root = tmp_path / "root"
    monkeypatch.setenv("PAPERS_JAX_DATA", str(root))
    (root / "raw" / "austen").mkdir(parents=True)  # begun, but holds none of its files
    install_brown_fixture(root)  # the test fixture has no fetch marker: it counts
    assert list(fetched.missing(["sotu", "brown", "austen", "minilm", "sotu"])) == [
        "sotu", "austen", "minilm"]
    with pytest.raises(DataError) as error:
        fetched.require(["sotu", "brown", "austen", "minilm"])
    message = str(error.value)
    assert message.startswith(f"not fetched into the data root {root} (PAPERS_JAX_DATA): sotu, "
                              "austen, minilm; fetch them with\n"
                              "    python -m data.fetch sotu austen minilm\n")
    assert "\n  austen: dataset 'austen' not found in" in message  # the folder that is there
    assert "\n  sotu:" not in message
    fetched.require(["brown"])
    with pytest.raises(DataError, match=r"unknown dataset 'brwn' for data.fetch; known: \[.*"
                                        r"TFDS catalog is read with config.data.source='tfds'"):
        fetched.require(["brwn"])


def test_a_prepared_dataset_needs_no_raw_files(brown_data_root, tmp_path, monkeypatch):
    root = tmp_path / "root"
    shutil.copytree(brown_data_root, root)
    monkeypatch.setenv("PAPERS_JAX_DATA", str(root))
    shutil.rmtree(paths.raw_dir("brown"))
    assert fetched.missing(["brown"]) == {}
    shutil.rmtree(paths.tfds_dir())
    assert list(fetched.missing(["brown"])) == ["brown"]


@pytest.mark.parametrize("config, names", [
    ("configs/bert/pretrain.py:smoke", "brown austen sotu"),
    ("configs/transformer/translate.py:smoke", "bible_en_es"),
    ("configs/bert/finetune.py:task=brown_pos,smoke", "brown minilm"),
    ("configs/bert/finetune.py:task=spam,init=scratch,smoke", "spam"),
    ("configs/vit/fashion_mnist.py:smoke", "fashion_mnist"),
])
def test_a_run_without_its_data_stops_first_naming_all_of_it(config, names, tmp_path,
                                                             monkeypatch):
    """Before the check, a run trained a vocabulary on the data it found (or began to, leaving
    a lock file), then failed on the first dataset missing. Now nothing is written."""
    from train.tasks import get_task

    root = tmp_path / "root"
    monkeypatch.setenv("PAPERS_JAX_DATA", str(root))
    with pytest.raises(DataError, match=f"\n    python -m data.fetch {names}$"):
        get_task(load_config_file(config))
    assert not root.exists()


def test_a_fetched_corpus_missing_files_is_named_before_it_is_built(tmp_path, monkeypatch):
    """Its builder checks a few files; with a fetch marker, every file it recorded is checked
    before the dataset is built from them (not built from half the corpus)."""
    from data.fetching import catalog, raw

    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    install_brown_fixture(tmp_path)  # an excerpt: the source expects none of the real files
    excerpt = dataclasses.replace(catalog.get_source("brown"), expected=())
    monkeypatch.setitem(catalog.SOURCES, "brown", excerpt)
    raw._write_marker(paths.raw_dir("brown"), excerpt)
    fetched.require(["brown"])  # whole
    victim = sorted(paths.raw_dir("brown").rglob("c*"))[-1]
    victim.unlink()
    with pytest.raises(DataError, match=f"{victim} is missing"):
        fetched.require(["brown"])
