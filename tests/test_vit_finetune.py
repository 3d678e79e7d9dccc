"""Fine-tuning a ViT from weights this project exported, offline: the commands of docs/models.md
("Weights in and out") run as written, each `python -m train` with `smoke` added to its variant
and a few steps, on the 28 x 28 Fashion-MNIST fixture: a tiny ViT trains, `python -m
train.export` writes it as a Hugging Face folder and as an .npz, and
`configs/vit/fashion_mnist.py:init=...` starts runs from them at twice the resolution (position
embeddings resampled) and with a new head; more runs start from the workdir itself, with
another class count (train/vit_init.py, train/tasks/classify.py). The console names the weights
and what changed; config.json records the model that ran."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from docs_blocks import export_block_commands, run_command
from flax import linen as nn
from flax import traverse_util

from models.vit import ViT, ViTConfig
from models.vit_transfer import resample_posemb
from train.config import ConfigError, apply_override, load_config_file


@pytest.fixture(scope="module")
def commands(tmp_path_factory):
    root = tmp_path_factory.mktemp("vit_weights")
    return root, export_block_commands(root, 6)


@pytest.fixture(scope="module")
def exported(fixture_data_root, commands):
    """(pretraining workdir, its HF export, its .npz export, its params): the first three
    commands of the docs' block (train, export twice)."""
    from train.checkpointing import load_params

    root, argvs = commands
    assert [a[0] for a in argvs[:3]] == ["train", "train.export", "train.export"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PAPERS_JAX_DATA", str(fixture_data_root))
        for argv in argvs[:3]:
            assert run_command(argv) == 0, argv
    workdir, hf, npz = (Path(p) for p in (argvs[0][argvs[0].index("--workdir") + 1],
                                          argvs[1][2], argvs[2][2]))
    assert (hf / "config.json").is_file() and npz.is_file()
    return workdir, hf, npz, load_params(workdir)


def _config(init: str, arg: str = "", **overrides):
    config = load_config_file(f"configs/vit/fashion_mnist.py:smoke,init={init}"
                              + (f",{arg}" if arg else ""))
    for key, value in {"train.num_steps": 6, "train.eval_every": 0,
                       "train.checkpoint_every": 6, **overrides}.items():
        apply_override(config, key, str(value))
    return config


def _initial_params(config):
    from train.tasks.classify import ClassificationTask

    task = ClassificationTask(config)
    variables = task.init_variables(jax.random.PRNGKey(0), task.dummy_inputs(1))
    return task, traverse_util.flatten_dict(jax.tree.map(np.asarray,
                                                         nn.meta.unbox(variables["params"])))


def test_the_exports_compute_the_run_they_came_from(exported, fashion_mnist_env, monkeypatch):
    """At the checkpoint's resolution a run from either export starts with the very function
    the pretraining run ended with: nothing lost or reordered on the way out and back; named
    from the home folder too (`init=~/...`, which the shell leaves unexpanded in `:init=`)."""
    workdir, hf, npz, params = exported
    monkeypatch.setenv("HOME", str(npz.parent))
    images = np.random.default_rng(0).normal(size=(3, 28, 28, 1)).astype(np.float32)
    saved = json.loads((workdir / "config.json").read_text())["model"]
    expected = ViT(ViTConfig(**{k: v for k, v in saved.items() if k != "name"})).apply(
        {"params": params}, images)
    for init in (hf, npz, workdir, *(f"~/{os.path.relpath(p, npz.parent)}" for p in (hf, npz))):
        task, flat = _initial_params(_config(str(init)))
        start = traverse_util.unflatten_dict(flat)
        np.testing.assert_allclose(task.model.apply({"params": start}, images), expected,
                                   atol=1e-5, rtol=0, err_msg=str(init))


def test_the_docs_fine_tuning_commands_run_as_written(exported, commands, fashion_mnist_env,
                                                     capsys):
    """The docs' fine-tuning commands: from the HF export at twice the resolution (the
    position table resampled, the classifier kept), from the .npz with a new head; each says
    so, and --print_config shows beforehand the model that then runs."""
    workdir, hf, npz, params = exported
    _, argvs = commands
    weights = ("(2 layers, hidden 32, patch 7, 28x28 images); its architecture replaces "
               "config.model's")
    notes = {hf: [f"weights: the Hugging Face checkpoint {hf} {weights}",
                  "position embeddings resampled bilinearly, each patch at its centre (image "
                  "28x28 -> 56x56, patch grid 4x4 -> 8x8; ViT Sec. 3.2), class token's kept",
                  "classifier kept (10 classes)"],
             npz: [f"weights: the .npz checkpoint {npz} {weights}",
                   "new zero-initialised classifier for 10 classes (a new head asked for)"]}
    assert len(argvs) == 5
    for argv, init, size in zip(argvs[3:], (hf, npz), ([56, 56], [28, 28])):
        workdir_index = argv.index("--workdir")
        plan = argv[:workdir_index] + argv[workdir_index + 2:] + ["--print_config"]
        assert run_command(plan) == 0
        printed, err = capsys.readouterr()
        assert all(note in err for note in notes[init]), err
        assert run_command(argv) == 0, argv
        _, err = capsys.readouterr()
        assert all(note in err for note in notes[init]), err
        ran = json.loads((Path(argv[workdir_index + 1]) / "config.json").read_text())["model"]
        assert ran == json.loads(printed)["model"]
        # The run's image size, the checkpoint's architecture (not the smoke config's stem).
        assert (ran["image_size"], ran["stem_channels"], ran["pool"], ran["activation"]) == (
            size, 0, "cls", "gelu_tanh")

    _, flat = _initial_params(_config(str(hf), "image_size=56"))
    np.testing.assert_allclose(flat[("posemb", "embedding")], resample_posemb(
        params["posemb"]["embedding"], (4, 4), (8, 8), 1), atol=1e-6, rtol=0)
    np.testing.assert_array_equal(flat[("block_1", "mlp", "wo", "kernel")],
                                  params["block_1"]["mlp"]["wo"]["kernel"])
    np.testing.assert_array_equal(flat[("head", "kernel")], params["head"]["kernel"])


def test_another_class_count_or_init_head_new_gets_a_zero_head(exported, fashion_mnist_env,
                                                               tmp_path):
    workdir, _, npz, params = exported
    tensors = dict(np.load(npz))  # a checkpoint whose classifier has 12 classes
    tensors["head/kernel"] = np.ones((tensors["head/kernel"].shape[0], 12), np.float32)
    tensors["head/bias"] = np.ones((12,), np.float32)
    np.savez(twelve := tmp_path / "twelve.npz", **tensors)
    config = _config(str(twelve), **{"model.scan_layers": True})
    task, flat = _initial_params(config)
    assert task.resolution().notes[-1] == ("new zero-initialised classifier for 10 classes (the "
                                           "checkpoint's has 12)")
    assert flat[("head", "kernel")].shape == (32, 10) and not flat[("head", "kernel")].any()
    with pytest.raises(ConfigError, match=r"the classifier has 12 classes \(config.model.num_"
                                          r"classes, or config.init's\), but config.data.name="
                                          r"'fashion_mnist' has 10: set --config.model.num_"):
        _initial_params(_config(str(npz), **{"model.num_classes": 12}))[0].train_source()
    np.testing.assert_array_equal(flat[("blocks", "attention", "query", "kernel")][1],
                                  params["block_1"]["attention"]["query"]["kernel"])
    config = _config(str(workdir), **{"init_head": "new"})
    task, flat = _initial_params(config)
    assert task.resolution().notes[-1].endswith("(a new head asked for)")
    assert not flat[("head", "kernel")].any()


def test_what_config_init_cannot_use_is_named(exported, fashion_mnist_env, tmp_path):
    from train.tasks.classify import ClassificationTask

    workdir, hf, npz, _ = exported
    with pytest.raises(ConfigError, match="is neither 'scratch', an .npz checkpoint, a Hugging "
                                          "Face folder"):
        ClassificationTask(_config(str(tmp_path / "nowhere")))
    with pytest.raises(ConfigError, match="no such .npz file"):
        ClassificationTask(_config(str(tmp_path / "missing.npz")))
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"task": {"name": "translate"}}))
    with pytest.raises(ConfigError, match="that run's task is 'translate', not 'classify'"):
        ClassificationTask(_config(str(other)))
    (other / "config.json").write_text(json.dumps(  # the convnet teacher's run
        {"task": {"name": "classify"}, "model": {"name": "convnet", "channels": [8]},
         "data": {"image_shape": [28, 28, 1]}}))
    with pytest.raises(ConfigError, match="that run trained a 'convnet', not a ViT"):
        ClassificationTask(_config(str(other)))
    with pytest.raises(ConfigError, match="set config.data.resize=True"):
        ClassificationTask(_config(str(hf), **{"model.image_size": "(56, 56)"}))
    with pytest.raises(ConfigError, match="config.init_head='old' is not one of"):
        ClassificationTask(_config(str(hf), init_head="old"))
    with pytest.raises(ConfigError, match=r"config.init_posemb_resample='edges' is not one of "
                                          r"\['centres', 'corners'\]"):
        ClassificationTask(_config(str(hf), init_posemb_resample="edges"))
    with pytest.raises(ConfigError, match="patch_size=7"):  # the checkpoint's patches
        ClassificationTask(_config(str(hf), "image_size=30"))
    # DeiT's token is architecture: the checkpoint's (none) used to replace it without a word
    with pytest.raises(ConfigError, match="distill_token=True but config.init=.* without "
                                          "DeiT's distillation token"):
        ClassificationTask(_config(str(npz), **{"model.distill_token": True}))


def test_export_refuses_what_its_format_cannot_describe(fashion_mnist_env, tmp_path, capsys):
    """The smoke default: a hybrid stem and mean pooling, which HF's ViT has not."""
    from train.__main__ import main
    from train.export import main as export

    workdir = tmp_path / "hybrid"
    assert main(["--config", "configs/vit/fashion_mnist.py:smoke", "--config.train.num_steps=1",
                 "--config.optimizer.warmup_steps=0", "--config.train.eval_every=0",
                 "--workdir", str(workdir)]) == 0
    capsys.readouterr()
    assert export([str(workdir), str(tmp_path / "hf")]) == 2
    assert "pool='mean' (HF ViT: 'cls'), stem_channels=16 (HF ViT: 0)" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()
    assert export([str(workdir), str(tmp_path / "out.npz")]) == 2
    assert "stem_channels=16" in capsys.readouterr().err
    # The workdir itself carries everything: fine-tuning from it keeps the stem, at 56 x 56.
    config = _config(str(workdir), "image_size=56")
    task, flat = _initial_params(config)
    assert task.model_config.stem_channels == 16 and ("stem", "kernel") in flat
    assert task.model.apply({"params": traverse_util.unflatten_dict(flat)},
                            jnp.zeros((1, 56, 56, 1))).shape == (1, 10)


def test_an_npz_table_as_long_as_the_runs_grid_is_read_at_that_grid(tmp_path):
    """An .npz keeps no grid: a 2 x 6 table (12 rows, no square) is read at a run's 2 x 6 grid
    (it was refused); a square 4 x 4 one stays 4 x 4 and is resampled to a 2 x 8 run's."""
    from test_vit_npz import published_names, write_fixture

    from train.vit_init import resolve_init

    tensors = write_fixture(tmp_path / "wide.npz", published_names(grid=(2, 6)))
    init = resolve_init(_config(str(tmp_path / "wide.npz"), **{"model.image_size": "(8, 24)"}))
    assert (init.model_config.image_size, init.model_config.grid) == ((8, 24), (2, 6))
    assert not any("resampled" in note for note in init.notes), init.notes
    np.testing.assert_array_equal(init.params["posemb"]["embedding"],
                                  tensors["Transformer/posembed_input/pos_embedding"][0])
    write_fixture(tmp_path / "square.npz", published_names(grid=(4, 4)))
    init = resolve_init(_config(str(tmp_path / "square.npz"), **{"model.image_size": "(8, 32)"}))
    assert init.model_config.grid == (2, 8)
    assert any("resampled" in note for note in init.notes), init.notes
    write_fixture(tmp_path / "six.npz", published_names(grid=(2, 3)))
    with pytest.raises(ConfigError, match=r"six.npz: .*6 patch positions, not a square grid nor "
                                          r"the 2x8 grid of the run's image size \(8, 32\)"):
        resolve_init(_config(str(tmp_path / "six.npz"), **{"model.image_size": "(8, 32)"}),
                     build=False)


def test_export_refuses_a_convnet_and_options_of_the_other_format(tmp_path, capsys):
    """Refused by name before any checkpoint is read (these workdirs hold only config.json)."""
    from train.config import to_json
    from models.safetensors_file import CheckpointError
    from train.export import export, main

    convnet, vit = tmp_path / "convnet", tmp_path / "vit"
    for workdir, config in ((convnet, "convnet_teacher.py:smoke"),
                            (vit, "fashion_mnist.py:plain")):
        workdir.mkdir()
        (workdir / "config.json").write_text(to_json(load_config_file(f"configs/vit/{config}")))
    for out in ("out.npz", "hf"):
        assert main([str(convnet), str(tmp_path / out)]) == 2
        err = capsys.readouterr().err
        assert "config.model.name='convnet', not a ViT: a convnet has no Hugging Face ViT or " \
               ".npz layout" in err, err
    with pytest.raises(ConfigError, match=r"--head model: for a Hugging Face folder; .*out.npz "
                                          r"is written as an .npz.*drop --head"):
        export(str(vit), str(tmp_path / "out.npz"), head="model")
    for out, format in (("hf", "auto"), ("out.npz", "hf")):
        with pytest.raises(ConfigError, match=r"--layout big_vision: for an .npz; .* is written "
                                              r"as a Hugging Face folder.*drop --layout"):
            export(str(vit), str(tmp_path / out), format=format, layout="big_vision")
    kept = (vit / "config.json").read_bytes()  # --overwrite replaces an .npz, not a run's file
    with pytest.raises(CheckpointError, match="config.json is not an .npz .*not replaced even "
                                              "with --overwrite"):
        export(str(vit), str(vit / "config.json"), format="npz", overwrite=True)
    assert (vit / "config.json").read_bytes() == kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["convnet", "vit"]


def test_export_writes_the_weights_the_final_eval_scored(fashion_mnist_env, tmp_path, capsys):
    """As python -m train.predict reads them: by default the average of the last checkpoints
    of a finished run that averages (its final eval's weights), --weights raw the latest
    checkpoint's, ema their moving average; the line printed names them."""
    from models.vit_npz import load_npz
    from train.__main__ import main
    from train.export import main as export
    from train.run_weights import load_weights

    workdir = tmp_path / "averaged"
    assert main(["--config", "configs/vit/fashion_mnist.py:plain,smoke", "--workdir",
                 str(workdir), "--config.train.num_steps=3", "--config.train.eval_every=0",
                 "--config.train.checkpoint_every=1", "--config.train.keep_checkpoints=3",
                 "--config.train.average_checkpoints=2", "--config.train.ema_decay=0.5",
                 "--config.optimizer.warmup_steps=0"]) == 0
    capsys.readouterr()
    written = {}
    for weights, words in (
            (None, "its average weights (the last 2 checkpoints averaged, steps 2, 3)"),
            ("raw", "its raw weights (the latest checkpoint, step 3)"),
            ("ema", "its ema weights (the moving average in the latest checkpoint, step 3)")):
        out = tmp_path / f"{weights}.npz"
        assert export([str(workdir), str(out), *(["--weights", weights] if weights else [])]) == 0
        assert capsys.readouterr().out.startswith(
            f"{out}: an .npz in the vit layout of {words} in {workdir} (")
        written[weights] = traverse_util.flatten_dict(load_npz(out)[1])
        want = traverse_util.flatten_dict(load_weights(workdir, weights=weights or "average"))
        assert written[weights].keys() == want.keys()
        for name, value in want.items():
            np.testing.assert_allclose(written[weights][name], value, rtol=1e-6, atol=1e-7,
                                       err_msg=str(name))
    for a, b in ((None, "raw"), (None, "ema"), ("raw", "ema")):  # three different weights
        assert not np.allclose(written[a]["head", "kernel"], written[b]["head", "kernel"])
