"""BERT pretraining task: smoke training on real Brown text lowers both losses, the loss is the
MLM mean over predicted tokens plus the NSP mean, phase 2 switches sequence length, and the
pretrained encoder loads into a bare BertModel for fine-tuning."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from data.errors import DataError
from train.config import ConfigError, apply_override, load_config_file
from train.tasks.base import batch_objective
from train.tasks.bert_pretrain import BertPretrainingTask

SMOKE = "configs/bert/pretrain.py:smoke"


def smoke_config(arg: str = "", **overrides):
    config = load_config_file(SMOKE + ("," + arg if arg else ""))
    apply_override(config, "data.names", "('brown',)")
    for key, value in overrides.items():
        apply_override(config, key, str(value))
    return config


def test_smoke_pretraining_lowers_both_losses_and_loads_for_fine_tuning(brown_env, tmp_path):
    from models.bert import BertModel
    from train.checkpointing import load_params
    from train.trainer import Trainer

    config = smoke_config(**{"train.num_steps": 60, "train.eval_every": 0,
                             "optimizer.learning_rate": 3e-3, "model.dropout_rate": 0.0,
                             "model.attention_dropout_rate": 0.0})
    trainer = Trainer(config, tmp_path)
    before = trainer.evaluate(trainer.init_state().params)
    final = trainer.run()
    assert final["mlm_loss"] < before["mlm_loss"] - 0.3
    assert final["nsp_loss"] < before["nsp_loss"]
    assert {"mlm_accuracy", "nsp_accuracy"} <= final.keys()
    # The logged label balance is the share of real eval rows whose B is random (label 1).
    batches, count = trainer.task.eval_batches(batch_size=config.data.eval_batch_size,
                                               process_index=0, process_count=1)
    labels = np.concatenate([b["next_sentence_label"][b["mask"] > 0]
                             for b in itertools.islice(batches, count)])
    assert final["nsp_random_fraction"] == pytest.approx(labels.mean(), abs=1e-6)

    # The encoder of the last checkpoint is a BertModel's parameters, as fine-tuning loads them.
    params = load_params(tmp_path)
    encoder = BertModel(trainer.task.model_config)
    ids = jnp.asarray(np.arange(1, 17, dtype=np.int32)[None])
    sequence, pooled = encoder.apply({"params": params["bert"]}, ids)
    full = trainer.task.model.apply({"params": trainer.final_state.params}, ids,
                                    masked_positions=jnp.zeros((1, 2), jnp.int32),
                                    method=lambda m, x, masked_positions: m.bert(x))
    np.testing.assert_allclose(sequence, full[0], rtol=1e-6, atol=1e-6)
    assert pooled.shape == (1, trainer.task.model_config.hidden_size)


def test_loss_is_mlm_mean_plus_nsp_mean(brown_env):
    """The training loss equals the MLM cross-entropy averaged over predicted tokens plus the
    NSP cross-entropy averaged over sequences, computed here in NumPy from the logits."""
    task = BertPretrainingTask(smoke_config(**{"model.dropout_rate": 0.0,
                                               "model.attention_dropout_rate": 0.0}))
    params = task.init_variables(jax.random.PRNGKey(0), task.dummy_inputs(1))["params"]
    batch = next(task.train_iterator(batch_size=8, seed=0, process_index=0, process_count=1))
    terms, metrics = task.loss_fn(params, batch, jax.random.PRNGKey(1))
    loss = batch_objective(terms, task.loss_normalizers(batch))
    out = task.model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                           batch["input_mask"], masked_positions=batch["masked_positions"])

    def log_softmax(x):
        x = np.asarray(x, np.float64)
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    mlm = -np.take_along_axis(log_softmax(out["mlm_logits"]), batch["masked_ids"][..., None],
                              -1)[..., 0]
    w = batch["masked_weights"]
    nsp = -np.take_along_axis(log_softmax(out["nsp_logits"]),
                              batch["next_sentence_label"][:, None], -1)[:, 0]
    expected = (mlm * w).sum() / w.sum() + nsp.mean()
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert float(metrics["mlm_loss"][1]) == w.sum()  # MLM counts only the predicted positions


def test_mlm_only_formats_have_no_nsp_metrics(brown_env):
    task = BertPretrainingTask(smoke_config("inputs=full_sentences,nsp=off"))
    params = task.init_variables(jax.random.PRNGKey(0), task.dummy_inputs(1))["params"]
    assert "seq_relationship" not in params
    batch = next(task.train_iterator(batch_size=4, seed=0, process_index=0, process_count=1))
    terms, metrics = task.loss_fn(params, batch, jax.random.PRNGKey(1))
    assert "nsp_loss" not in metrics and "mlm_loss" in metrics
    assert terms.keys() == task.loss_normalizers(batch).keys() == {"mlm"}


def test_phase2_switches_to_longer_sequences(brown_env):
    """...and to phase 2's own batch size (BERT: 1,024 x 128 tokens, then 256 x 512), which the
    trainer's throughput and MFU count per step (global_batch_at)."""
    config = smoke_config(**{"train.num_steps": 10, "data.phase2_fraction": 0.2,
                             "data.phase2_batch_size": 2})
    task = BertPretrainingTask(config)
    iterator = task.train_iterator(batch_size=4, seed=0, process_index=0, process_count=1)
    shapes = [next(iterator)["input_ids"].shape for _ in range(10)]
    assert shapes == [(4, 32)] * 8 + [(2, 64)] * 2
    assert [task.global_batch_at(step) for step in range(10)] == [8] * 8 + [2] * 2
    assert task.train_batch_keys(config) == ("batch_size", "phase2_batch_size")
    predictions = next(iterator)["masked_positions"].shape[1]
    assert predictions == config.data.phase2_max_predictions
    # MFU counts each step at its phase's cost: the longer rows of phase 2 cost more.
    from train import flops

    per_step = [task.flops_per_example_at(step) for step in range(10)]
    phase2 = flops.bert_train_flops_per_example(task.model_config, 64,
                                                config.data.phase2_max_predictions)
    assert per_step == [task.flops_per_example()] * 8 + [phase2] * 2
    assert phase2 > task.flops_per_example()


def test_phased_data_resumes_exactly_on_either_side_of_the_switch(brown_env):
    """The iterator state of a run stopped in phase 1 or in phase 2 makes a fresh task's iterator
    continue with the very batches the uninterrupted one gives next (position, phase and the
    phase-2 pipeline's own position), switching to 64 tokens after the same 7 batches (phase 2
    is the last 10 x 0.29 = 2.9 steps, rounded to 3)."""
    config = smoke_config(**{"train.num_steps": 10, "data.phase2_fraction": 0.29})
    kwargs = dict(batch_size=4, seed=0, process_index=0, process_count=1)
    straight = BertPretrainingTask(config).train_iterator(**kwargs)
    batches = [next(straight) for _ in range(10)]
    assert [b["input_ids"].shape[1] for b in batches] == [32] * 7 + [64] * 3
    task = BertPretrainingTask(config)
    for stop in (5, 8):                  # stopped in phase 1, and one batch into phase 2
        first = task.train_iterator(**kwargs)
        for _ in range(stop):
            next(first)
        resumed = task.train_iterator(**kwargs)
        resumed.set_state(first.get_state())
        for expected in batches[stop:]:
            got = next(resumed)
            assert got.keys() == expected.keys()
            for key in expected:
                np.testing.assert_array_equal(got[key], expected[key], err_msg=f"{stop} {key}")


def test_length_and_format_checks(brown_env):
    # A position table (learned, as BERT; the smoke config's ALiBi has no length limit) bounds
    # both phases' lengths by max_position_embeddings (64 in the smoke config).
    with pytest.raises(ConfigError, match="max_seq_length=128.*max_position_embeddings"):
        BertPretrainingTask(smoke_config(**{"data.max_seq_length": 128,
                                            "data.max_predictions": 19,
                                            "model.posemb": "learned"}))
    with pytest.raises(ConfigError, match="phase2_max_seq_length=128"):
        BertPretrainingTask(smoke_config(**{"data.phase2_fraction": 0.1,
                                            "data.phase2_max_seq_length": 128,
                                            "data.phase2_max_predictions": 19,
                                            "model.posemb": "learned"}))
    BertPretrainingTask(smoke_config(**{"data.max_seq_length": 128,  # ALiBi: no limit
                                        "data.max_predictions": 19}))
    # a masking rate capped by max_predictions: 15% of 126 tokens is 19, of 30 (phase 2) is 4
    with pytest.raises(ConfigError, match=r"config.data.max_predictions=5 is fewer than the 19 "
                                          r"predictions config.data.select_prob=0.15 chooses .*"
                                          r"cap the masking rate at 4.0%; set --config.data."
                                          r"max_predictions=19 or more"):
        BertPretrainingTask(smoke_config(**{"data.max_seq_length": 128}))
    with pytest.raises(ConfigError, match=r"phase2_max_predictions=3 is fewer than the 4 .*"
                                          r"phase2_max_seq_length=32: 30 tokens"):
        BertPretrainingTask(smoke_config(**{"data.phase2_fraction": 0.5,
                                            "data.phase2_max_seq_length": 32,
                                            "data.phase2_max_predictions": 3}))
    for length in (0, -5):  # refused by name, not an error of the arrays' shapes
        with pytest.raises(ConfigError, match=f"max_seq_length={length} must be >= 3"):
            BertPretrainingTask(smoke_config(**{"data.max_seq_length": length}))
    with pytest.raises(DataError, match="no split 'dev'"):  # before training, not at its eval
        BertPretrainingTask(smoke_config(**{"data.eval_split": "dev"})).check_eval_split()
    with pytest.raises(ConfigError, match="nsp=True needs config.data.input_format"):
        BertPretrainingTask(smoke_config(**{"data.input_format": "doc_sentences",
                                            "data.short_seq_prob": 0.0}))
    with pytest.raises(ConfigError, match="mask_prob"):
        BertPretrainingTask(smoke_config(**{"data.mask_prob": 0.5}))
    with pytest.raises(ConfigError, match=r"short_seq_prob=0.1 with input_format='doc_sentences'"
                                          r": only segment_pair draws short pairs"):
        BertPretrainingTask(smoke_config(**{"data.input_format": "doc_sentences",
                                            "model.nsp": False, "data.short_seq_prob": 0.1}))


def test_table8_mask_variants_read_mask_same_random():
    # BERT Table 8's columns are MASK, SAME, RND: '0-0-100' is all random replacement.
    for spec, (mask, same, rnd) in (("80-10-10", (0.8, 0.1, 0.1)), ("100-0-0", (1.0, 0.0, 0.0)),
                                    ("80-0-20", (0.8, 0.0, 0.2)), ("80-20-0", (0.8, 0.2, 0.0)),
                                    ("0-20-80", (0.0, 0.2, 0.8)), ("0-0-100", (0.0, 0.0, 1.0))):
        data = load_config_file(f"configs/bert/pretrain.py:mask={spec}").data
        assert (data.mask_prob, data.keep_prob, data.random_prob) == pytest.approx((mask, same, rnd))
    with pytest.raises(ConfigError, match="sum to 100"):
        load_config_file("configs/bert/pretrain.py:mask=80-10-20")
