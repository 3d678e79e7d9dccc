"""The TFDS catalog paths of data/builders/sources.py (wmt14_translate, wikipedia, imagenet2012),
on TFDS's mock data (tests/tfds_mock.py) and on a small stand-in written as a real TFDS dataset
(benchmarks/standin_data.py): ImageNet's images of any size in its dataset info and through
`python -m train.predict`; a multi-process run never downloading or preparing a dataset; a
fraction of the labels drawn without decoding an image; the mock's splits being the datasets'
own, and the recipes reading only those."""

from __future__ import annotations

import dataclasses
import io
from unittest import mock

import jax
import numpy as np
import pytest
from PIL import Image
from tfds_mock import DECODED, mock_tfds, split_names, split_rows
from tiny_runs import predictor_args

from data.builders import sources
from data.errors import DataError
from data.pipelines import subsets

WMT14 = "wmt14_translate/de-en"


# ---------------------------------------------------------------- ImageNet's any-size images


def test_imagenet_dataset_info_has_images_of_any_size():
    with mock_tfds(4):
        info = sources.dataset_info("imagenet2012", "tfds")
    assert info.image_shape == (None, None, 3)  # TFDS's Image(shape=(None, None, 3))
    assert info.num_classes == 1000 == len(info.class_names) and info.tfds_name == "imagenet2012"


def test_an_imagenet_run_predicts_named_classes_on_images_brought_to_its_size(tmp_path):
    """`python -m train.predict` on an imagenet2012 run: the dataset info read (images of any
    size), the label names printed, a 50 x 70 JPEG centre-cropped to the run's 32 x 32."""
    from train.image_models import MODELS
    from train.predict import Run, classify
    from train.tasks.classify import ClassificationTask

    from configs.vit.imagenet import get_config

    config = get_config("smoke")
    path = tmp_path / "photo.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (50, 70, 3), np.uint8)).save(path)
    printed, notes = [], []
    with mock_tfds(4):
        model_config = ClassificationTask.plan(config).model_config
        model = MODELS["vit"].module(model_config)
        params = model.init(jax.random.PRNGKey(0), np.zeros((1, 32, 32, 3), np.float32),
                            train=False)["params"]
        run = Run(tmp_path, {"data": config.data.to_dict(),
                             "model": {"name": "vit", **dataclasses.asdict(model_config)}},
                  None, params)
        (ranked,) = classify.predict(run, predictor_args(classify, "--image", str(path),
                                                         "--top_k", "2"),
                                     out=printed.append, note=notes.append)
        names = sources.dataset_info("imagenet2012", "tfds").class_names
    assert len(ranked) == 2 and all(name in names for name, _ in ranked), ranked
    assert not any("classes are numbered" in note for note in notes), notes
    assert any("50x70" in note and "32x32" in note for note in notes), notes


# ---------------------------------------------------------------- no download on many hosts


def test_process_count_is_one_without_starting_jax():
    assert sources.process_count() == 1


@pytest.mark.parametrize("read", ["source", "features", "info"])
def test_a_multi_process_run_never_prepares_a_catalog_dataset(monkeypatch, read):
    """Not prepared and 2 processes: a DataError naming the `tfds build` command, and nothing
    downloaded or prepared; prepared, it is read; one process prepares it as before."""
    import tensorflow_datasets as tfds

    name = "imagenet2012" if read == "info" else WMT14
    calls = {
        "source": lambda: sources.get_data_source(name, "train", source="tfds"),
        "features": lambda: sources.features_of(name, "tfds"),
        "info": lambda: sources.dataset_info(name, "tfds")}
    prepared = []
    monkeypatch.setattr(sources, "offline_reason", lambda: None)  # as if online
    with mock_tfds(4, prepared=False), mock.patch.object(  # inside the mock's own patch
            tfds.core.DatasetBuilder, "download_and_prepare",
            lambda self, *a, **kw: prepared.append(self.name)):
        calls[read]()  # one process: prepared where it can be downloaded, as documented
        assert prepared == [name.partition("/")[0]]
        monkeypatch.setattr(sources, "process_count", lambda: 2)
        with pytest.raises(DataError, match=(
                rf"{name!r} is not prepared in .*a run of 2 processes does not download or "
                rf"prepare it.*tfds build {name} --file_format=array_record --data_dir=\S+")):
            calls[read]()
        assert prepared == [name.partition("/")[0]]  # not again
    with mock_tfds(4):  # prepared before launching: read by every process
        assert calls[read]() is not None


def test_an_unprepared_catalog_dataset_offline_is_refused_at_once(monkeypatch, tmp_path):
    """No host name resolves (the build machines): a DataError naming it and `tfds build`,
    before TFDS's downloader retries each file for minutes; nothing probed behind a proxy."""
    import socket

    import tensorflow_datasets as tfds

    for variable in sources.PROXY_VARIABLES:
        monkeypatch.delenv(variable, raising=False)

    def unresolved(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unresolved)
    prepared = []
    with mock.patch.object(tfds.core.DatasetBuilder, "download_and_prepare",
                           lambda self, *a, **kw: prepared.append(self.name)):
        with pytest.raises(DataError, match=(
                r"'mnist' could not be loaded \(ConnectionError: no internet here: the host name "
                r"storage.googleapis.com does not resolve .*tfds build mnist ")):
            sources.get_data_source("mnist", "test", source="tfds", data_dir=tmp_path)
    assert prepared == []
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert sources.offline_reason() is None


def test_two_joined_processes_stop_before_preparing_a_dataset():
    """Two local processes joined as `python -m train` joins them (train/distributed.py): each
    sees 2 processes without being told, and refuses the unprepared dataset unprepared."""
    import os
    import subprocess
    import sys

    import portpicker
    from cluster_sims import CLUSTER_VARS
    from conftest import REPO, json_report, xla_flags

    env = {k: v for k, v in os.environ.items() if k not in CLUSTER_VARS}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(1), JAX_NUM_PROCESSES="2",
               JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{portpicker.pick_unused_port()}")
    processes = [subprocess.Popen([sys.executable, "tests/scripts/unprepared_processes.py"],
                                  cwd=REPO, env=dict(env, JAX_PROCESS_ID=str(index)),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for index in range(2)]
    for process in processes:
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-3000:]
        report = json_report(stdout)
        assert report["processes"] == 2 and report["prepared"] == [], report
        assert f"tfds build {WMT14} --file_format=array_record" in report["error"], report


# ---------------------------------------------------------------- labels without the images


def _jpeg(rng, height: int, width: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), np.uint8)).save(buffer, "JPEG")
    return buffer.getvalue()


def test_split_labels_decode_no_image_of_a_real_tfds_dataset(tmp_path, monkeypatch):
    """A stand-in imagenet2012 prepared by TFDS (JPEGs in array_record files): the labels
    of its split come out as a decoding source gives them, and no JPEG is decoded."""
    import tensorflow_datasets as tfds

    from benchmarks.standin_data import write

    rng = np.random.default_rng(0)
    examples = [{"image": _jpeg(rng, 8 + i, 12), "label": int(rng.integers(1000)),
                 "file_name": f"{i}.JPEG"} for i in range(12)]
    write("imagenet2012", {"train": lambda: examples}, tmp_path)
    decoded = []
    decode = tfds.features.Image.decode_example_np
    monkeypatch.setattr(tfds.features.Image, "decode_example_np",
                        lambda self, x: decoded.append(1) or decode(self, x))
    labels = subsets.split_labels("imagenet2012", "train[2:]", source="tfds", data_dir=tmp_path)
    assert decoded == []
    source = sources.get_data_source("imagenet2012", "train[2:]", source="tfds",
                                     data_dir=tmp_path)  # the split's order: TFDS's shuffled
    np.testing.assert_array_equal(labels, [source[i]["label"] for i in range(10)])
    assert len(decoded) == 10 and source[0]["image"].shape[1:] == (12, 3)  # this one decodes
    assert sorted(labels) != sorted(e["label"] for e in examples)  # 2 of 12 left out


def test_a_fraction_of_imagenet_is_drawn_from_undecoded_labels():
    """configs/vit/imagenet.py with data.train_fraction=0.25: the subset is drawn from the
    labels without an image decoded, and holds the labels the full split gives its indices."""
    from train.tasks.classify import ClassificationTask

    from configs.vit.imagenet import get_config

    config = get_config("smoke")
    config.data.update(train_fraction=0.25, train_subset="random")
    with mock_tfds(16):
        task = ClassificationTask(config)
        DECODED.clear()
        subset = task.train_source()
        assert DECODED["image"] == 0 and DECODED["label"] == 16  # every label, no image
        full = sources.get_data_source("imagenet2012", "train", source="tfds")
        assert len(subset) == 4
        np.testing.assert_array_equal([subset[i]["label"] for i in range(4)],
                                      [full[int(i)]["label"] for i in subset.indices])
        assert isinstance(subset[0]["image"], np.ndarray) and DECODED["image"] > 0


# ---------------------------------------------------------------- the mock's splits


@pytest.mark.parametrize("name, split, known", [
    ("imagenet2012", "test", True), ("imagenet2012", "valid", False),
    ("wikipedia/20230601.en", "train[-8:]", True), ("wikipedia/20230601.en", "validation", False),
    (WMT14, "validation[:10%]", True), (WMT14, "tset", False)])
def test_the_mock_has_only_the_datasets_splits(name, split, known):
    with mock_tfds(10):
        if known:
            assert len(sources.get_data_source(name, split, source="tfds")) > 0
        else:
            with pytest.raises(DataError, match=rf"Unknown split '{split}'\. Should be one of "
                                                rf"\{list(split_names(name))}\."):
                sources.get_data_source(name, split, source="tfds")


@pytest.mark.parametrize("config, arg", [
    ("configs/vit/imagenet.py", ""), ("configs/vit/imagenet.py", "minival"),
    ("configs/vit/imagenet.py", "smoke"), ("configs/vit/imagenet.py", "stage=finetune,init=x"),
    ("configs/bert/pretrain.py", "data=wikipedia"),
    ("configs/bert/pretrain.py", "size=base,data=wikipedia"),
    ("configs/bert/pretrain.py", "data=wikipedia,smoke"),
    *[("configs/transformer/translate.py", f"size={size},data=wmt14{smoke}")
      for size in ("cpu", "small", "base", "big") for smoke in ("", ",smoke")]])
def test_the_recipes_read_splits_their_datasets_have(config, arg):
    from train.config import load_config_file

    data = load_config_file(f"{config}:{arg}" if arg else config).data
    name = data.names[0] if "names" in data and data.names else data.name
    assert data.source == "tfds" and split_names(name)
    for split in (data.train_split, data.eval_split):
        assert split_rows(split, 10_000, name), split
