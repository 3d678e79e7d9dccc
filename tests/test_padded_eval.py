"""An evaluation does not depend on how the eval split is cut into batches.

Every task's eval pipeline pads the split's last global batch with mask-0 rows, so that shapes
stay static and every process runs the same number of steps (data/pipelines/: images.py,
translation.py, pretraining.py, finetune.py). The padding must count for nothing. For each task, and
each fine-tuning data kind, the metric sums and counts of the whole split in one unpadded batch
equal those of batches that leave a padded last batch, fed by two or three processes (each
process's batches from the task's `eval_batches`, concatenated in process order into the global
batch, as `jax.make_array_from_process_local_data` does); and the trainer's own `evaluate` in
one process (BLEU and the number of translations included, for translation) gives the same
metrics with a padded last batch.

Planted, the image eval dividing by every row of a batch, padding included, passed every other
test: the real Fashion-MNIST test split, 10,000 images in batches of 500, is never padded.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from finetune_examples import register
from random_params import perturbed

from train.config import apply_override, load_config_file
from train.metrics_writer import summarize
from train.trainer import Trainer

FINETUNE = "configs/bert/finetune.py:smoke,init=scratch"
# id: (config file, overrides, the fixture that holds the data). Parameters are perturbed off
# their initialisation: a zero head gives every example, padding included, the same loss.
CASES = {
    "classify": ("configs/vit/fashion_mnist.py:smoke", {}, "fashion_mnist_env"),
    "mae_pretrain": ("configs/vit/mae.py:smoke", {}, "fashion_mnist_env"),
    "translate": ("configs/transformer/translate.py:smoke", {}, "bible_env"),
    "causal_lm": ("configs/lm/english.py:smoke", {}, "english_lm_env"),
    "bert_pretrain": ("configs/bert/pretrain.py:smoke", {"data.names": "('brown',)"},
                      "brown_env"),
    "finetune_classify_spam": (FINETUNE, {"data.name": "spam"}, "spam_env"),
    "finetune_tag_brown_pos": (FINETUNE, {"data.name": "brown_pos", "data.eval_split": "test"},
                           "brown_env"),
    **{f"finetune_{kind}_generated": (FINETUNE, {"data.name": f"generated_{kind}"}, "empty_env")
       for kind in ("pair_classify", "span", "multiple_choice")},
}


@pytest.fixture
def empty_env(tmp_path, monkeypatch):
    """An empty data root (the generated datasets' vocabularies go there), the datasets
    registered."""
    for kind in ("pair_classify", "span", "multiple_choice"):
        register(kind)
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    return tmp_path


def _trainer(name: str, eval_batch_size: int) -> Trainer:
    config_file, overrides, _ = CASES[name]
    config = load_config_file(config_file)
    for key, value in {**overrides, "data.eval_batch_size": eval_batch_size}.items():
        apply_override(config, key, str(value))
    return Trainer(config, "/unused")


def _padded_batch(num_examples: int, processes: int) -> int:
    """A per-process batch size near a third of the split per global batch whose last global
    batch is padded."""
    size = max(1, num_examples // (3 * processes))
    while num_examples % (size * processes) == 0:
        size += 1
    return size


def _global_batches(task, *, batch_size: int, processes: int):
    """The eval split's global batches (numeric arrays) as `processes` processes feed them, each
    taking `batch_size` rows of every one; every process's iterator must end after the number of
    batches `eval_batches` announced."""
    shards = [task.eval_batches(batch_size=batch_size, process_index=i, process_count=processes)
              for i in range(processes)]
    (steps,) = {count for _, count in shards}
    for _ in range(steps):
        parts = [next(iterator) for iterator, _ in shards]
        yield {key: np.concatenate([part[key] for part in parts]) for key, value in
               parts[0].items() if np.asarray(value).dtype.kind in "biuf"}
    for iterator, _ in shards:
        with pytest.raises(StopIteration):
            next(iterator)


def _eval_sums(task, eval_fn, params, **feed) -> dict:
    """{metric: (sum, count)} over the eval split, fed as `_global_batches(task, **feed)`."""
    totals = None
    for batch in _global_batches(task, **feed):
        sums = jax.device_get(eval_fn(params, batch))
        totals = sums if totals is None else jax.tree.map(np.add, totals, sums)
    return totals


def _assert_same_metrics(actual: dict, expected: dict, what: str) -> None:
    assert sorted(actual) == sorted(expected), what
    for name, value in expected.items():
        assert actual[name] == pytest.approx(value, rel=1e-5, abs=1e-6), f"{name}, {what}"


def _evaluated(name: str, request):
    """(task, examples in the eval split, parameters perturbed off their
    initialisation, the jitted eval_fn) of case `name`, its data fixture in place. Perturbed:
    a zero head gives every example, padding included, the same loss."""
    request.getfixturevalue(CASES[name][2])
    trainer = _trainer(name, eval_batch_size=1)
    task = trainer.task
    _, num_examples = task.eval_batches(batch_size=1, process_index=0, process_count=1)
    params = perturbed(jax.device_get(trainer.init_state().params), scale=0.1)
    return task, num_examples, params, jax.jit(task.eval_fn)


@pytest.mark.parametrize("name", list(CASES))
def test_eval_metrics_do_not_depend_on_the_padding_of_the_last_batch(name, request):
    task, num_examples, params, eval_fn = _evaluated(name, request)

    whole = _eval_sums(task, eval_fn, params, batch_size=num_examples, processes=1)
    for processes in (2, 3):  # one process: the trainer's evaluate below
        size = _padded_batch(num_examples, processes)
        sums = _eval_sums(task, eval_fn, params, batch_size=size, processes=processes)
        what = f"{num_examples} examples, {processes} processes x {size} rows"
        assert sorted(sums) == sorted(whole), what
        for metric, (total, count) in whole.items():
            assert sums[metric][1] == count, f"{metric} count, {what}"
            np.testing.assert_allclose(sums[metric][0], total, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{metric} sum, {what}")

    expected = task.derived_metrics(summarize(whole))
    decode = task.decode_every is not None
    if decode:  # BLEU and the number of translations of one unpadded batch (the BLEU of random
        # parameters is 0: a padding row translated and scored shows in the number)
        (batch,) = _global_batches(task, batch_size=num_examples, processes=1)
        outputs = jax.device_get(jax.jit(task.predict_fn)(params, batch))
        expected.update(task.score_predictions([outputs], log=lambda _: None))
        assert expected["decoded"] == num_examples
    padded = _padded_batch(num_examples, 1)
    actual = _trainer(name, padded).evaluate(params, decode=decode, log=lambda _: None)
    _assert_same_metrics(actual, expected, f"Trainer.evaluate, eval_batch_size={padded}")


@pytest.mark.parametrize("name", list(CASES))
def test_rows_marked_as_padding_count_for_nothing_where_they_would_score(name, request):
    """A copy of the split's real rows appended as padding (row mask 0; the causal LM's token
    weights 0) leaves every metric's sum and count as they were, although each copy would score
    exactly as its original does. Planted, classify's and NSP's accuracies ignoring the mask in
    their sums passed the test above: its padded rows (zero images, all-pad inputs) were never
    predicted as their label."""
    task, num_examples, params, eval_fn = _evaluated(name, request)
    real = padded = None
    for batch in _global_batches(task, batch_size=num_examples, processes=1):
        marker = "mask" if "mask" in batch else "weights"
        copy = {**batch, marker: np.zeros_like(batch[marker])}
        both = {key: np.concatenate([batch[key], copy[key]]) for key in batch}
        sums, with_copy = (jax.device_get(eval_fn(params, b)) for b in (batch, both))
        real = sums if real is None else jax.tree.map(np.add, real, sums)
        padded = with_copy if padded is None else jax.tree.map(np.add, padded, with_copy)
    assert any(float(total) > 0 for total, _ in real.values())  # something the copies would add
    for metric, (total, count) in real.items():
        assert padded[metric][1] == pytest.approx(count), f"{metric} count"
        np.testing.assert_allclose(padded[metric][0], total, rtol=1e-5, atol=1e-6,
                                   err_msg=f"{metric} sum")
