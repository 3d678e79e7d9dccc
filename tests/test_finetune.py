"""BERT fine-tuning tasks: each head's loss against NumPy, a smoke run of every task kind that
lowers the loss, initialisation from a pretraining workdir and from MiniLM, the frozen encoder of
the feature-based mode, and the baselines. The heads alone: test_bert_heads.py; best-span
decoding: test_spans.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from flax import traverse_util

from conftest import run_python
from finetune_examples import register, sentence
from data.errors import DataError
from train.config import ConfigError, apply_override, load_config_file

SMOKE = "configs/bert/finetune.py:smoke,init=scratch"
SPAM_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "spam"


@pytest.fixture
def data_root(tmp_path, monkeypatch):
    """An empty data root: the scratch vocabularies of the generated datasets go here."""
    root = tmp_path / "data_root"
    root.mkdir()
    monkeypatch.setenv("PAPERS_JAX_DATA", str(root))
    return root


def smoke_config(name: str, arg: str = "", **overrides):
    config = load_config_file(SMOKE + ("," + arg if arg else ""))
    apply_override(config, "data.name", name)
    for key, value in overrides.items():
        apply_override(config, key, str(value))
    return config


def _task(config):
    from train.tasks.finetune import FinetuneTask

    return FinetuneTask(config)


# ----------------------------------------------------------------------------- losses


def _log_softmax(x):
    x = np.asarray(x, np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _nll(logits, labels):
    return -np.take_along_axis(_log_softmax(logits), np.asarray(labels)[..., None], -1)[..., 0]


@pytest.mark.parametrize("kind", ["classify", "pair_classify", "tag", "span", "multiple_choice"])
def test_head_losses_match_numpy(kind, data_root):
    task = _task(smoke_config(register(kind), **{"model.dropout_rate": 0.0,
                                                  "model.attention_dropout_rate": 0.0}))
    params = task.init_variables(jax.random.PRNGKey(0), task.dummy_inputs(1))["params"]
    batch = next(task.train_iterator(batch_size=8, seed=0, process_index=0, process_count=1))
    batch["mask"][-1] = 0.0  # a padding row counts for nothing
    if kind == "span":  # nor does an example whose answer the window cut off
        assert np.all(batch["answer_weight"] == 1)
        batch["answer_weight"][0] = 0.0
    terms, metrics = task.loss_fn(params, batch, jax.random.PRNGKey(1))
    normalizers = task.loss_normalizers(batch)
    out = task._apply(params, batch, train=False)
    mask = batch["mask"]
    if kind == "tag":
        w = batch["label_weights"] * mask[:, None]
        expected = (_nll(out, np.maximum(batch["labels"], 0)) * w).sum()
        count = w.sum()
        assert out.shape == (8, 32, 3)
    elif kind == "span":
        w = batch["answer_weight"] * mask
        # The head's own logits, the softmax over each row's real tokens only.
        raw = task.model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                               batch["input_mask"], train=False)
        real = np.asarray(batch["input_mask"]) > 0
        assert not real[mask > 0].all()  # rows with padding, which must not count
        start, end = (np.where(real, np.asarray(x, np.float64), -np.inf) for x in raw)
        expected = (0.5 * (_nll(start, batch["start_positions"])
                           + _nll(end, batch["end_positions"])) * w).sum()
        count = w.sum()
        assert count == 6
    else:
        expected = (_nll(out, batch["label"]) * mask).sum()
        count = mask.sum()
        assert out.shape == (8, 3 if kind == "multiple_choice" else 2)
    assert terms.keys() == normalizers.keys() == {"cross_entropy"} and "loss" not in metrics
    assert float(terms["cross_entropy"]) == pytest.approx(expected, rel=1e-5)
    assert float(normalizers["cross_entropy"]) == count


# ----------------------------------------------------------------------------- smoke runs


LEARN = {"train.num_steps": 60, "optimizer.learning_rate": 3e-3}  # enough for the tiny model


def _lowers_loss(config, tmp_path, metric: str):
    from train.trainer import Trainer

    trainer = Trainer(config, tmp_path / "run")
    before = trainer.evaluate(trainer.init_state().params)
    after = trainer.run()
    assert after["loss"] < before["loss"] - 0.05, (before, after)
    assert metric in after and np.isfinite(after[metric])
    return trainer, before, after


@pytest.mark.parametrize("kind,metric", [("pair_classify", "accuracy"), ("span", "exact_match"),
                                         ("multiple_choice", "accuracy")])
def test_smoke_fine_tuning_on_generated_data(kind, metric, data_root, tmp_path):
    config = smoke_config(register(kind), **LEARN)
    _, _, after = _lowers_loss(config, tmp_path, metric)
    if kind == "span":
        assert "f1" in after


def test_smoke_fine_tuning_classifies_spam(tmp_path, monkeypatch):
    from data import builders

    shutil.copytree(SPAM_FIXTURE / "package", tmp_path / "raw" / "spam" / "package")
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    builders.prepare("spam")
    # Real messages carry a weaker signal for the tiny model than the generated tasks: after 60
    # steps its eval loss has moved by only about the test's margin, so it trains twice as long.
    config = smoke_config("spam", **{**LEARN, "train.num_steps": 120})
    trainer, _, after = _lowers_loss(config, tmp_path, "accuracy")
    log = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert '"truncated"' in log and '"epochs"' in log  # data_metrics reach the train logs


def test_smoke_fine_tuning_tags_brown(brown_env, tmp_path):
    config = smoke_config("brown_pos", **LEARN, **{"data.eval_split": "test"})
    _, _, after = _lowers_loss(config, tmp_path, "token_accuracy")
    assert 0 <= after["sentence_accuracy"] <= after["token_accuracy"] <= 1


# ----------------------------------------------------------------------------- initialisation


def _flat(tree):
    return traverse_util.flatten_dict(jax.tree.map(np.asarray, nn.meta.unbox(tree)))


def test_fine_tuning_from_a_pretraining_workdir(brown_env, tmp_path):
    from data.vocab import wordpiece
    from train.checkpointing import load_params
    from train.trainer import Trainer

    pre = tmp_path / "pretrain"
    run_python(["-m", "train", "--config", "configs/bert/pretrain.py:smoke", "--workdir",
                str(pre), "--config.data.names=('brown',)", "--config.train.num_steps=8",
                "--config.train.eval_every=0"], env={"PAPERS_JAX_DATA": str(brown_env)})
    config = smoke_config("brown_genre", **{"init": str(pre), "data.eval_split": "test",
                                            "train.num_steps": 6})
    task = _task(config)
    vocab = wordpiece.cache_path(("brown",), "train", vocab_size=400, lowercase=True)
    assert task.tokenizer.fingerprint == wordpiece.load_tokenizer(vocab).fingerprint
    assert (task.model_config.hidden_size, task.model_config.num_layers) == (32, 2)
    pretrained = _flat(load_params(pre)["bert"])
    params = task.init_variables(jax.random.PRNGKey(0), task.dummy_inputs(1))["params"]
    loaded = _flat(params["bert"])
    assert loaded.keys() == pretrained.keys()
    for key, value in pretrained.items():
        np.testing.assert_array_equal(loaded[key], value)

    trainer = Trainer(config, tmp_path / "finetune")
    start = _flat(trainer.init_state().params["bert"])
    for key, value in pretrained.items():  # the trainer's state starts from the checkpoint
        np.testing.assert_array_equal(start[key], value)
    final = trainer.run()
    assert np.isfinite(final["loss"])

    with pytest.raises(ConfigError, match="config.json"):
        _task(smoke_config("brown_genre", init=str(tmp_path / "nowhere")))
    # config values the pretrained model and vocabulary replace are named, not dropped silently
    other = _task(smoke_config("brown_genre", **{"init": str(pre), "model.hidden_size": 64,
                                                 "data.lowercase": False, "data.vocab_size": 9}))
    line = other.init.description
    assert "config values it replaces: model.hidden_size 64 -> 32" in line, line
    assert f"data.vocab_size 9 -> {task.model_config.vocab_size} (the init's)" in line, line
    assert "data.lowercase False -> True" in line and "num_layers" not in line, line


def test_a_checkpoint_of_another_shape_is_refused(brown_env, tmp_path):
    from train.finetune_init import replace_encoder

    task = _task(smoke_config("brown_genre", **{"data.eval_split": "test"}))
    variables = task.init_variables(jax.random.PRNGKey(0), task.dummy_inputs(1))
    params = jax.tree.map(np.asarray, nn.meta.unbox(variables["params"]["bert"]))
    params["pooler"]["dense"]["kernel"] = np.zeros((3, 3), np.float32)
    del params["embeddings"]["norm"]
    with pytest.raises(ConfigError, match=r"(?s)missing embeddings/norm/scale.*pooler/dense/kernel"):
        replace_encoder(variables, params)


@pytest.fixture(scope="module")
def minilm_root(tmp_path_factory):
    """A data root holding MiniLM, fetched with data.fetch (a verified earlier fetch in the
    default root is linked instead of downloading it again); skipped if it cannot be fetched."""
    from data import paths
    from data.fetching import catalog, raw
    from data.errors import DataError

    root = tmp_path_factory.mktemp("minilm_root")
    previous = os.environ.get("PAPERS_JAX_DATA")
    default = paths.raw_dir("minilm")
    if previous is None and raw.verify(catalog.get_source("minilm"), default) is None:
        (root / "raw").mkdir()
        (root / "raw" / "minilm").symlink_to(default)
    os.environ["PAPERS_JAX_DATA"] = str(root)
    try:
        raw.fetch("minilm", verbose=False)
    except DataError as e:
        pytest.skip(f"minilm cannot be fetched: {e}")
    finally:
        if previous is None:
            del os.environ["PAPERS_JAX_DATA"]
        else:
            os.environ["PAPERS_JAX_DATA"] = previous
    return root


def test_init_minilm_loads_its_weights_vocabulary_and_dimensions(minilm_root, brown_data_root,
                                                                 monkeypatch):
    from data.fetching import pretrained
    from models.hf_bert import load_hf_checkpoint

    for link in (Path("raw") / "brown", Path("tfds")):  # the Brown fixture beside MiniLM
        if not (minilm_root / link).exists():
            (minilm_root / link).symlink_to(brown_data_root / link)
    monkeypatch.setenv("PAPERS_JAX_DATA", str(minilm_root))
    config = smoke_config("brown_genre", **{"init": "minilm", "data.eval_split": "test"})
    task = _task(config)
    cfg = task.model_config
    assert (cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.vocab_size) == (384, 6, 12, 30522)
    assert cfg.dropout_rate == config.model.dropout_rate
    assert task.tokenizer.vocab_size == 30522 and task.tokenizer.lowercase
    _, weights = load_hf_checkpoint(pretrained.minilm_dir())
    params = task.init_variables(jax.random.PRNGKey(0), task.dummy_inputs(1))["params"]
    loaded, expected = _flat(params["bert"]), _flat(weights)
    assert loaded.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(loaded[key], value)
    batch = next(task.train_iterator(batch_size=4, seed=0, process_index=0, process_count=1))
    assert batch["input_ids"][0, 0] == task.tokenizer.cls_id == 101
    terms, _ = task.loss_fn(params, batch, jax.random.PRNGKey(1))
    assert np.isfinite(float(terms["cross_entropy"]))
    assert float(task.loss_normalizers(batch)["cross_entropy"]) == 4


# ----------------------------------------------------------------------------- features


@pytest.mark.parametrize("kind,features", [("classify", "sum_last_four"), ("tag", "last")])
def test_feature_based_mode_never_changes_the_encoder(kind, features, data_root, tmp_path):
    from train.trainer import Trainer

    config = smoke_config(register(kind), f"features={features}", **{"train.num_steps": 5})
    assert config.optimizer.weight_decay == 0.0
    task = _task(config)
    params = task.init_variables(jax.random.PRNGKey(0), task.dummy_inputs(1))["params"]
    batch = next(task.train_iterator(batch_size=8, seed=0, process_index=0, process_count=1))
    grads = jax.grad(
        lambda p: task.loss_fn(p, batch, jax.random.PRNGKey(1))[0]["cross_entropy"])(params)
    assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree.leaves(grads["bert"]))
    head = [g for k, g in grads.items() if k != "bert"]
    assert any(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(head))
    if kind == "tag":
        assert "bilstm_1" in params

    if kind == "tag":
        return  # the BiLSTM head's training run is left to the classify case (compile time)
    trainer = Trainer(config, tmp_path / "run")
    initial = _flat(trainer.init_state().params)
    trainer.run()
    final = _flat(trainer.final_state.params)
    assert not any(not np.array_equal(final[k], v) for k, v in initial.items() if k[0] == "bert")
    assert any(not np.array_equal(final[k], v) for k, v in initial.items() if k[0] != "bert")


def test_feature_mode_checks(data_root):
    name = register("classify")
    with pytest.raises(ConfigError, match="weight_decay"):
        _task(smoke_config(name, "features=last", **{"optimizer.weight_decay": 0.01}))
    with pytest.raises(ConfigError, match="needs at least 4 encoder layers"):
        _task(smoke_config(name, "features=concat_last_four", **{"model.num_layers": 3}))
    with pytest.raises(ConfigError, match="feature-based mode exists for"):
        _task(smoke_config(register("span"), "features=last"))
    with pytest.raises(DataError, match="no split 'dev'"):  # before training, not at its eval
        _task(smoke_config(name, **{"data.eval_split": "dev"})).check_eval_split()


def test_config_variants():
    for task, length in (("spam", 128), ("tweets", 64), ("brown_genre", 128), ("brown_pos", 64),
                         ("squad", 384), ("swag", 128)):
        config = load_config_file(f"configs/bert/finetune.py:task={task}")
        assert config.data.max_seq_length == length and config.init == "minilm"
        assert config.optimizer.warmup_steps == round(0.1 * config.train.num_steps)
    config = load_config_file("configs/bert/finetune.py:task=spam,epochs=3,lr=3e-5")
    assert config.train.num_steps == 453 and config.optimizer.learning_rate == 3e-5
    assert load_config_file("configs/bert/finetune.py:task=squad").data.source == "tfds"
    with pytest.raises(ConfigError, match="task='mnli'"):
        load_config_file("configs/bert/finetune.py:task=mnli")


# ----------------------------------------------------------------------------- baselines


def test_word_accuracy_counts_the_words_cut_off_as_wrong(brown_env):
    """Two sentences tagged right wherever a word fits: one whole (2 words), one of 7 words of
    which 3 fit in max_seq_length. token_accuracy is of the 5 words that fit (1.0),
    sentence_accuracy of what was checked (1.0), word_accuracy of all 9 words (5 / 9); an
    eval padding row counts nothing."""
    import jax.numpy as jnp

    task = _task(smoke_config("brown_pos", init="scratch"))
    labels = np.array([[-100, 1, 2, -100, -100, -100], [-100, 3, 1, 2, -100, -100],
                       [-100] * 6], np.int32)
    weights = (labels >= 0).astype(np.float32)
    outputs = jnp.asarray(np.eye(task.dataset.num_labels)[np.maximum(labels, 0)] * 10.0)
    batch = {"labels": labels, "label_weights": weights, "mask": np.array([1.0, 1.0, 0.0]),
             "num_words": np.array([2.0, 7.0, 0.0], np.float32)}
    _, _, metrics = task._scores(outputs, {k: jnp.asarray(v) for k, v in batch.items()},
                                 train=False)
    ratio = {name: float(total) / float(count) for name, (total, count) in metrics.items()}
    assert ratio["token_accuracy"] == 1.0 and ratio["sentence_accuracy"] == 1.0
    assert ratio["word_accuracy"] == pytest.approx(5 / 9)


def test_baselines_on_tiny_data():
    from train import baselines

    rng = np.random.default_rng(0)

    def texts(n):
        labels = rng.integers(3, size=n)
        cue = np.array(["alpha", "beta", "gamma"])
        return ([f"{sentence(rng)} {cue[y]} {sentence(rng)}" for y in labels],
                labels.astype(np.int32))

    train, validation, test = texts(120), texts(30), texts(30)
    result = baselines.bow_logreg(train, validation, test, 3)
    assert result["accuracy"] == 1.0 and result["l2"] in baselines.L2_GRID
    assert baselines.majority([0, 1, 1, 2], [1, 1, 0, 2]) == {"label": 1, "accuracy": 0.5}

    bow = baselines.BagOfWords(["a a b", "b c", "c"], min_count=1)
    rows, cols, vals = bow.transform(["a a b"])
    idf = np.log(4 / np.array([2, 3])) + 1  # a in 1 of 3 texts, b in 2
    want = np.array([1 + np.log(2), 1.0]) * idf
    got = dict(zip((bow.vocab[w] for w in ("a", "b")), want / np.linalg.norm(want)))
    assert dict(zip(cols.tolist(), vals.tolist())) == pytest.approx(got)

    tagged = baselines.majority_tag(
        [{"words": ["the", "run", "run"], "tags": [0, 1, 2]}, {"words": ["run"], "tags": [2]}],
        [{"words": ["the", "run", "new"], "tags": [0, 1, 2]}])
    assert tagged["token_accuracy"] == pytest.approx(2 / 3)  # new -> most frequent tag 2
    assert tagged["unseen_fraction"] == pytest.approx(1 / 3)
    with pytest.raises(SystemExit) as exit_info:  # argparse: usage and exit 2
        baselines.main(["--task", "nosuch"])
    assert exit_info.value.code == 2
