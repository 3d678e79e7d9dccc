"""Translation weights out and back in, offline: the commands of docs/models.md's Transformer
block run as written (each `python -m train` with `smoke` added and a few steps) on the Bible
fixture: a tiny Transformer of Marian's architecture trains, `python -m train.export` writes it
as a Hugging Face Marian folder (transformers' FlaxMarianMTModel computes the same logits, its
MarianTokenizer gives the same ids), and `configs/transformer/translate.py:init=...` fine-tunes
from it with its vocabulary (train/translate_init.py). What cannot be used is refused by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest
import transformers
from docs_blocks import export_block_commands, run_command
from flax import linen as nn
from flax import traverse_util
from hf_loading import load_pretrained

from models.hf_marian import MarianIds
from models.transformer import Transformer, TransformerConfig, shift_right, with_layer_layout
from train.config import ConfigError, apply_override, load_config_file


@pytest.fixture(scope="module")
def exported(bible_data_root, tmp_path_factory):
    """(workdir, export folder, the workdir's params, the docs' commands): the block's first two
    commands (train, export)."""
    from train.checkpointing import load_params

    argvs = export_block_commands(tmp_path_factory.mktemp("translate_weights"), 4,
                                  needs="translate.py")
    assert [a[0] for a in argvs] == ["train", "train.export", "train"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PAPERS_JAX_DATA", str(bible_data_root))
        for argv in argvs[:2]:
            assert run_command(argv) == 0, argv
    workdir, folder = Path(argvs[0][argvs[0].index("--workdir") + 1]), Path(argvs[1][2])
    return workdir, folder, load_params(workdir), argvs


def _run_model(workdir) -> TransformerConfig:
    saved = json.loads((workdir / "config.json").read_text())["model"]
    return TransformerConfig(**{k: v for k, v in saved.items() if k != "name"})


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # not used by HF here
def test_the_export_is_the_run_in_transformers(exported, bible_env):
    """FlaxMarianMTModel loads every tensor and computes our run's logits (in Marian's ids), and
    MarianTokenizer tokenizes as our pipeline does, renumbered."""
    from train import vocabulary

    workdir, folder, params, _ = exported
    cfg = _run_model(workdir)
    tokenizer = vocabulary.load(workdir)
    ids = MarianIds.for_ours(cfg.vocab_size, eos_id=tokenizer.eos_id,
                             start_id=cfg.start_id(tokenizer.bos_id))
    assert cfg.decoder_start == "pad" and cfg.sinusoid_layout == "halves"
    text = ["In the beginning God created the heaven and the earth.", "And God said"]
    ours = [tokenizer.encode(t) + [tokenizer.eos_id] for t in text]
    theirs = transformers.MarianTokenizer.from_pretrained(folder)(text)["input_ids"]
    assert [list(ids.theirs(row)) for row in ours] == theirs
    inputs = np.zeros((2, max(map(len, ours))), np.int32)
    for row, tokens in enumerate(ours):
        inputs[row, :len(tokens)] = tokens
    targets = shift_right(inputs, cfg.start_id(tokenizer.bos_id), decoder_start="pad")
    logits = Transformer(cfg).apply({"params": params}, inputs, targets)
    hf = load_pretrained(transformers.FlaxMarianMTModel, folder)
    hf_logits = hf(ids.theirs(inputs), attention_mask=(inputs != 0).astype(np.int32),
                   decoder_input_ids=ids.theirs(targets)).logits
    real = inputs != 0
    np.testing.assert_allclose(np.asarray(hf_logits)[real],
                               np.asarray(logits)[..., ids.ours(np.arange(cfg.vocab_size))][real],
                               atol=1e-5, rtol=0)


def _config(init: str, **overrides):
    config = load_config_file(f"configs/transformer/translate.py:smoke,init={init}")
    for key, value in {"train.num_steps": 4, "train.eval_every": 0, **overrides}.items():
        apply_override(config, key, str(value))
    return config


def _initial_params(config):
    from train.tasks.translate import TranslationTask

    task = TranslationTask(config)
    variables = task.init_variables(jax.random.PRNGKey(0), task.dummy_inputs(1))
    return task, traverse_util.flatten_dict(jax.tree.map(np.asarray,
                                                         nn.meta.unbox(variables["params"])))


def test_fine_tuning_starts_from_the_export_and_its_vocabulary(exported, bible_env, capsys):
    """The docs' last command: from the export, with its vocabulary and architecture (not the
    smoke config's paper choices), --print_config showing beforehand the model that runs; the
    run starts from the exported weights exactly, as one from the workdir does (scanned
    here)."""
    from train import vocabulary

    workdir, folder, params, argvs = exported
    argv = argvs[2]
    workdir_index = argv.index("--workdir")
    plan = argv[:workdir_index] + argv[workdir_index + 2:] + ["--print_config"]
    assert run_command(plan) == 0
    printed, err = capsys.readouterr()
    note = f"weights: the Hugging Face Marian checkpoint {folder}"
    assert note in err
    assert run_command(argv) == 0, argv
    _, err = capsys.readouterr()
    assert note in err
    tuned = Path(argv[workdir_index + 1])
    ran = json.loads((tuned / "config.json").read_text())["model"]
    assert ran == json.loads(printed)["model"]
    assert ran == json.loads((workdir / "config.json").read_text())["model"]
    assert vocabulary.same(vocabulary.load(tuned), vocabulary.load(workdir))
    want = traverse_util.flatten_dict(params)
    for init, overrides in ((folder, {}), (workdir, {"model.scan_layers": True})):
        task, flat = _initial_params(_config(str(init), **overrides))
        if overrides:  # the scanned model's blocks, read in the loop layout
            flat = traverse_util.flatten_dict(with_layer_layout(
                traverse_util.unflatten_dict(flat), scan=False))
        assert set(flat) == set(want)
        for path, value in want.items():
            np.testing.assert_array_equal(flat[path], value, err_msg=f"{init} {path}")
        assert task.resolution().notes[0].startswith("weights: ")


def test_what_config_init_cannot_use_is_named(exported, bible_env, tmp_path):
    from train.tasks.translate import TranslationTask

    workdir, folder, _, _ = exported
    with pytest.raises(ConfigError, match="is neither 'scratch', a Hugging Face Marian folder"):
        TranslationTask(_config(str(tmp_path / "nowhere")))
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare)
    for name in ("source.spm", "target.spm", "vocab.json"):
        (bare / name).unlink()
    with pytest.raises(ConfigError, match="holds no tokenizer"):
        TranslationTask(_config(str(bare)))
    remapped = tmp_path / "remapped"  # OPUS-MT's kind: vocab.json numbers pieces otherwise
    shutil.copytree(folder, remapped)
    vocab = json.loads((remapped / "vocab.json").read_text())
    first, second = sorted(vocab)[5:7]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (remapped / "vocab.json").write_text(json.dumps(vocab))
    with pytest.raises(ConfigError, match="maps 2 pieces .* to other ids than source.spm"):
        TranslationTask(_config(str(remapped)))
    (remapped / "target.spm").write_bytes(b"another model")
    with pytest.raises(ConfigError, match="source.spm and target.spm are different"):
        TranslationTask(_config(str(remapped)))
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"task": {"name": "classify"}}))
    with pytest.raises(ConfigError, match="that run's task is 'classify', not 'translate'"):
        TranslationTask(_config(str(other)))
    with pytest.raises(ConfigError, match="data.max_length=200 is longer than the position"):
        TranslationTask(_config(str(folder), **{"data.max_length": 200}))
    (workdir / "vocabulary" / "sentencepiece.model").rename(tmp_path / "kept.model")
    try:
        with pytest.raises(ConfigError, match="keeps no vocabulary"):
            TranslationTask(_config(str(workdir)))
    finally:
        (tmp_path / "kept.model").rename(workdir / "vocabulary" / "sentencepiece.model")


def test_export_refuses_what_marian_cannot_describe(exported, tmp_path, capsys):
    """The paper's architecture (interleaved sinusoids, LayerNorm eps 1e-6) has no Marian
    equivalent: refused from the run's config.json, before any weight is read (this workdir has
    none); --head is a ViT option, and an .npz is not a translation format."""
    from train.export import main as export

    trained = exported[0]
    workdir = tmp_path / "paper"
    shutil.copytree(trained / "vocabulary", workdir / "vocabulary")
    saved = json.loads((trained / "config.json").read_text())
    saved["model"].update(sinusoid_layout="interleaved", norm_epsilon=1e-6)
    (workdir / "config.json").write_text(json.dumps(saved))
    assert export([str(workdir), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "sinusoid_layout='interleaved' (HF Marian: 'halves')" in err
    assert "norm_epsilon=1e-06 (HF Marian: 1e-05)" in err
    assert "configs/transformer/translate.py:arch=marian" in err
    assert not (tmp_path / "hf").exists()
    assert export([str(workdir), "   "]) == 2 and "OUT '   ' is blank" in capsys.readouterr().err
    assert export([str(workdir), str(tmp_path / "hf"), "--head", "model"]) == 2
    assert "--head model: for a ViT" in capsys.readouterr().err
    assert export([str(workdir), str(tmp_path / "out.npz")]) == 2
    assert "exports as a Hugging Face Marian folder" in capsys.readouterr().err
