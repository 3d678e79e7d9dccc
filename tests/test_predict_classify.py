"""python -m train.predict WORKDIR on a ViT classification run: an image file gives the model's
probabilities on exactly the input the run's eval pipeline makes of that image (PNG or .npy),
named by the dataset's labels; another size or channel count is converted and resized with a
message (or refused); clear errors for a file that is not an image, no image, a workdir of a
task without a predictor, one without a checkpoint; two devices give what one gives."""

from __future__ import annotations

import json
import re

import jax
import numpy as np
import pytest
from conftest import run_python
from PIL import Image
from tiny_runs import data_root, predictor_args, train

from data.builders import sources
from data.pipelines import image_crops
from models.vit import ViT, ViTConfig
from train import run_config
from train.config import ConfigError, load_config_file
from train.predict import __main__ as predict_cli
from train.predict import classify, load_run
from train.predict.image_files import read_image

SMOKE = "configs/vit/fashion_mnist.py:smoke"


@pytest.fixture(scope="module")
def vit_run(tmp_path_factory, fixture_data_root):
    """The smoke ViT trained for 3 steps on the Fashion-MNIST fixture."""
    return train(tmp_path_factory.mktemp("vit_run"), SMOKE, fixture_data_root,
                 "--config.train.num_steps=3", "--config.train.eval_every=0",
                 "--config.optimizer.warmup_steps=1")


@pytest.fixture(scope="module")
def eval_examples(fixture_data_root):
    """(raw uint8 images, their normalised form from the run's eval pipeline, labels, the
    label names) of the first 4 eval examples."""
    from train.tasks.classify import ClassificationTask

    with data_root(fixture_data_root):
        config = load_config_file(SMOKE)
        task = ClassificationTask(config)
        batch = next(task.eval_batches(batch_size=4, process_index=0, process_count=1)[0])
        source = sources.get_data_source(config.data.name, config.data.eval_split)
        raw = [np.asarray(source[i]["image"]) for i in range(4)]
        names = sources.dataset_info(config.data.name).class_names
    return raw, batch["image"], names


def _probabilities(run, images):
    model = ViT(run_config.saved_model(ViTConfig, run.config, run.workdir))
    return np.asarray(jax.nn.softmax(model.apply({"params": run.params}, images, train=False)))


def test_images_get_the_models_probabilities_on_the_eval_pipelines_input(
        vit_run, eval_examples, tmp_path, fixture_data_root):
    raw, normalised, names = eval_examples
    files = []
    for i, image in enumerate(raw):  # PNG files and .npy arrays, [h, w, 1] and [h, w]
        if i % 2:
            path = tmp_path / f"{i}.npy"
            np.save(path, image if i == 1 else image[..., 0])
        else:
            path = tmp_path / f"{i}.png"
            Image.fromarray(image[..., 0]).save(path)
        files.append(str(path))
    run = load_run(vit_run)
    printed, notes = [], []
    with data_root(fixture_data_root):
        got = classify.predict(run, predictor_args(
            classify, *sum((["--image", f] for f in files), []), "--top_k", "3",
            "--batch_size", "3"), out=printed.append, note=notes.append)
    want = _probabilities(run, normalised)
    assert notes == []  # the fixture's images are the run's: nothing converted or resized
    for ranked, p, line, path in zip(got, want, printed, files):
        top = np.argsort(-p)[:3]
        assert [name for name, _ in ranked] == [names[i] for i in top]
        np.testing.assert_allclose([prob for _, prob in ranked], p[top], rtol=1e-5, atol=1e-6)
        assert line.startswith(f"{path}: {names[top[0]]} ")


def test_another_size_and_channels_are_converted_with_a_message_or_refused(
        vit_run, eval_examples, tmp_path, fixture_data_root):
    raw, _, _ = eval_examples
    big = np.repeat(np.repeat(np.repeat(raw[0], 2, 0), 2, 1), 3, 2)  # 56x56 RGB
    path = tmp_path / "big.png"
    Image.fromarray(big).save(path)
    run = load_run(vit_run)
    notes = []
    with data_root(fixture_data_root):
        got = classify.predict(run, predictor_args(classify, "--image", str(path), "--top_k",
                                                   "10"), out=len, note=notes.append)
        preprocess = classify.Preprocess(run, None, len)
    assert notes == [f"{path}: converted from PIL mode RGB to L (1 channel, as the run's images)",
                     f"{path}: resize from 56x56 to 28x28 pixels, the run's image size "
                     "(config.data.image_shape)"]
    grey = np.asarray(Image.fromarray(big).convert("L"))[..., None]
    pixels = image_crops.resize(grey, (28, 28))
    expected = _probabilities(run, classify.image_pipeline.normalize(
        pixels[None], preprocess.mean, preprocess.std))[0]
    np.testing.assert_allclose(sorted(p for _, p in got[0]), np.sort(expected), rtol=1e-5)
    with data_root(fixture_data_root), pytest.raises(ConfigError, match=(
            r"big.png is 56x56 pixels; the run's images are 28x28: resize it, or leave out "
            r"--resize refuse")):
        classify.predict(run, predictor_args(classify, "--image", str(path), "--resize",
                                             "refuse"), out=len, note=len)


def test_16_bit_grey_is_scaled_to_8_bits_and_wider_modes_refused(tmp_path):
    """A 16-bit PNG (PIL mode I;16) is value / 257 rounded, not PIL's convert('L'), which clips
    at 255 (a nearly white image); modes I and F have no fixed range and are refused."""
    wide = (np.arange(28 * 28).reshape(28, 28) * 83).astype(np.uint16)  # 0..64989
    path = tmp_path / "wide.png"
    Image.fromarray(wide).save(path)
    assert Image.open(path).mode == "I;16"
    notes = []
    grey = read_image(str(path), channels=1, size=(28, 28), resize="refuse", note=notes.append)
    np.testing.assert_array_equal(grey[..., 0], np.round(wide / 257).astype(np.uint8))
    scaled = (f"{path}: 16-bit grey (PIL mode I;16) scaled to 8 bits, value / 257 (0..65535 "
              "onto 0..255)")
    assert notes == [scaled]
    rgb = read_image(str(path), channels=3, size=(28, 28), resize="refuse", note=notes.append)
    np.testing.assert_array_equal(rgb, np.repeat(grey, 3, axis=-1))
    assert notes[1:] == [scaled, f"{path}: converted from PIL mode L to RGB (3 channels, as "
                                 "the run's images)"]
    for dtype, mode in ((np.int32, "I (32-bit integer pixels)"),
                        (np.float32, "F (floating-point pixels)")):
        path = tmp_path / f"{mode[0]}.tif"
        Image.fromarray(wide.astype(dtype)).save(path)
        with pytest.raises(ConfigError, match=re.escape(
                f"{path} has PIL mode {mode}, which has no fixed range to scale to the run's "
                "8-bit pixels: export it as an 8-bit image")):
            read_image(str(path), channels=1, size=(28, 28), resize="refuse", note=len)


def test_errors_name_the_problem(vit_run, tmp_path, capsys, fixture_data_root):
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    floats = tmp_path / "floats.npy"
    np.save(floats, np.zeros((28, 28), np.float32))
    run = load_run(vit_run)
    with data_root(fixture_data_root):
        for argv, message in (
                ([], "no image: give --image FILE"),
                (["--image", str(text)], "notes.png is not an image (PIL reads PNG, JPEG"),
                (["--image", str(tmp_path / "absent.png")], "absent.png does not exist"),
                (["--image", str(floats)], "floats.npy holds float32 values; an image array "
                                           "holds uint8 pixels"),
                (["--image", str(floats), "--top_k", "0"], "--top_k=0 must be >= 1")):
            with pytest.raises(ConfigError, match=re.escape(message)):
                classify.predict(run, predictor_args(classify, *argv), out=len, note=len)
    other = tmp_path / "distill"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"task": {"name": "mae_pretrain"}}))
    assert predict_cli.main([str(other)]) == 2
    error = capsys.readouterr().err
    assert "holds a 'mae_pretrain' run; python -m train.predict supports" in error
    assert "fine-tune or probe it (configs/vit/fashion_mnist.py:init=WORKDIR[,probe])" in error
    untrained = tmp_path / "untrained"
    untrained.mkdir()
    (untrained / "config.json").write_text((vit_run / "config.json").read_text())
    assert predict_cli.main([str(untrained), "--image", str(text)]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_two_devices_give_what_one_gives(vit_run, eval_examples, tmp_path, fixture_data_root):
    raw, _, _ = eval_examples
    files = []
    for i, image in enumerate(raw[:3]):
        files.append(str(tmp_path / f"{i}.png"))
        Image.fromarray(image[..., 0]).save(files[-1])
    argv = [str(vit_run), "--top_k", "2", *sum((["--image", f] for f in files), [])]
    lines = []
    with data_root(fixture_data_root):
        classify.predict(load_run(vit_run), predictor_args(classify, *argv[1:]),
                         out=lines.append, note=len)
    result = run_python(["-m", "train.predict", *argv], devices=2,
                        env={"PAPERS_JAX_DATA": str(fixture_data_root)})
    got = result.stdout.splitlines()[-3:]
    for mine, theirs in zip(lines, got, strict=True):  # the same classes, probabilities to 1e-4
        assert [part.rsplit(" ", 1)[0] for part in mine.split(", ")] == \
            [part.rsplit(" ", 1)[0] for part in theirs.split(", ")]
        np.testing.assert_allclose([float(part.rsplit(" ", 1)[1]) for part in mine.split(", ")],
                                   [float(part.rsplit(" ", 1)[1]) for part in theirs.split(", ")],
                                   atol=2e-4)
