"""Baselines for the fine-tuning tasks, without a Transformer: what BERT has to beat.

    python -m train.baselines --task spam            # majority class + bag-of-words LR
    python -m train.baselines --task all --workdir workdirs/baselines   # + DIR/record.json

  majority        the most frequent training label, always (classify tasks);
  bow_logreg      multinomial logistic regression on bag-of-words features: lowercase word
                  unigrams (runs of letters/digits, `WORD`) seen at least `min_count` times in
                  the training texts (the `max_features` most frequent), tf-idf weighted
                  (sublinear tf 1 + log(count), smoothed idf log((1 + n) / (1 + df)) + 1) and
                  L2-normalised per text. Loss: mean cross-entropy + (l2 / 2) |W|^2 (bias not
                  penalised), minimised full-batch by L-BFGS (optax.lbfgs, zoom line search) in
                  JAX, on sparse inputs (gather + segment_sum, never a dense n x V matrix). `l2`
                  is picked from `L2_GRID` by validation accuracy; test accuracy is reported;
  majority_tag    POS tagging (brown_pos): each word's most frequent training tag (exact word
                  form), and the most frequent tag overall for words never seen in training;
                  token accuracy over words, also split into seen / unseen words.

Every number comes from the same splits the fine-tuning runs use (data/pipelines/finetune_datasets.py).
With --workdir, the results go to DIR/record.json (train/run_record.py: the command, the
machine, the code version), which `python -m train.records save DIR baselines` commits.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import re
import sys
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from etils import epath

from data.errors import DataError
from train import storage

WORD = re.compile(r"[^\W_]+")
L2_GRID = (1e-6, 1e-5, 1e-4, 1e-3)
CLASSIFY_TASKS = ("spam", "tweets", "brown_genre")
TAG_TASKS = ("brown_pos",)


# ----------------------------------------------------------------------------- features


def words(text: str) -> list[str]:
    """Lowercase word unigrams of `text`."""
    return WORD.findall(text.lower())


class BagOfWords:
    """Tf-idf bag-of-words features (module docstring), fitted on training texts."""

    def __init__(self, texts: Sequence[str], *, min_count: int = 2, max_features: int = 50_000):
        counts = collections.Counter(w for t in texts for w in words(t))
        kept = sorted((w for w, c in counts.items() if c >= min_count),
                      key=lambda w: (-counts[w], w))[:max_features]
        self.vocab = {w: i for i, w in enumerate(kept)}
        df = np.zeros(len(kept), np.float64)
        for t in texts:
            for i in {self.vocab[w] for w in words(t) if w in self.vocab}:
                df[i] += 1
        self.idf = (np.log((1 + len(texts)) / (1 + df)) + 1).astype(np.float32)

    @property
    def num_features(self) -> int:
        return len(self.vocab)

    def transform(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sparse rows as (row index, feature index, value) arrays, each row L2-normalised."""
        rows, cols, vals = [], [], []
        for r, t in enumerate(texts):
            c = collections.Counter(self.vocab[w] for w in words(t) if w in self.vocab)
            if not c:
                continue
            idx = np.fromiter(c.keys(), np.int32, len(c))
            v = (1 + np.log(np.fromiter(c.values(), np.float32, len(c)))) * self.idf[idx]
            rows.append(np.full(len(c), r, np.int32))
            cols.append(idx)
            vals.append(v / np.linalg.norm(v))
        if not rows:
            return (np.zeros(0, np.int32),) * 2 + (np.zeros(0, np.float32),)
        return np.concatenate(rows), np.concatenate(cols), np.concatenate(vals).astype(np.float32)


# ----------------------------------------------------------------------------- the model


def _logits(params, sparse, num_rows: int):
    rows, cols, vals = sparse
    contributions = params["w"][cols] * vals[:, None]  # [nnz, K]
    return jax.ops.segment_sum(contributions, rows, num_segments=num_rows) + params["b"]


def logreg_objective(params, sparse, labels, l2: float):
    """Mean cross-entropy of the linear model + (l2 / 2) |W|^2."""
    logits = _logits(params, sparse, labels.shape[0])
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1).mean()
    return nll + 0.5 * l2 * jnp.sum(params["w"] ** 2)


@functools.partial(jax.jit, static_argnames=("max_iter",))
def _lbfgs(params, sparse, labels, l2, *, max_iter: int, tol: float):
    fun = lambda p: logreg_objective(p, sparse, labels, l2)  # noqa: E731
    solver = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(fun)

    def step(carry):
        params, state, _ = carry
        value, grad = value_and_grad(params, state=state)
        updates, state = solver.update(grad, state, params, value=value, grad=grad,
                                       value_fn=fun)
        return optax.apply_updates(params, updates), state, optax.tree.norm(grad)

    def more(carry):
        _, state, grad_norm = carry
        return (optax.tree.get(state, "count") < max_iter) & (grad_norm > tol)

    init = (params, solver.init(params), jnp.asarray(jnp.inf))
    return jax.lax.while_loop(more, step, init)[0]


def fit_logreg(sparse, labels: np.ndarray, num_features: int, num_classes: int, *, l2: float,
               max_iter: int = 300, tol: float = 1e-5):
    """Parameters {'w' [V, K], 'b' [K]} minimising `logreg_objective` by full-batch L-BFGS
    (compiled once per data shape: `l2` and `tol` are traced)."""
    params = {"w": jnp.zeros((num_features, num_classes)), "b": jnp.zeros((num_classes,))}
    return _lbfgs(params, tuple(jnp.asarray(a) for a in sparse), jnp.asarray(labels, jnp.int32),
                  jnp.float32(l2), max_iter=max_iter, tol=jnp.float32(tol))


def predict_logreg(params, sparse, num_rows: int) -> np.ndarray:
    sparse = tuple(jnp.asarray(a) for a in sparse)
    return np.asarray(jnp.argmax(_logits(params, sparse, num_rows), -1))


# ----------------------------------------------------------------------------- baselines


def majority(train_labels: Sequence[int], test_labels: Sequence[int]) -> dict[str, float]:
    label = collections.Counter(int(x) for x in train_labels).most_common(1)[0][0]
    return {"label": label, "accuracy": float(np.mean(np.asarray(test_labels) == label))}


def bow_logreg(train: tuple[list[str], np.ndarray], validation: tuple[list[str], np.ndarray],
               test: tuple[list[str], np.ndarray], num_classes: int, *,
               l2_grid: Sequence[float] = L2_GRID, min_count: int = 2,
               max_features: int = 50_000) -> dict[str, float]:
    """Validation-selected L2, then test accuracy (module docstring)."""
    bow = BagOfWords(train[0], min_count=min_count, max_features=max_features)
    sparse = {name: bow.transform(texts) for name, (texts, _) in
              (("train", train), ("validation", validation), ("test", test))}
    best = None
    for l2 in l2_grid:
        params = fit_logreg(sparse["train"], train[1], bow.num_features, num_classes, l2=l2)
        accuracy = float(np.mean(predict_logreg(params, sparse["validation"], len(validation[1]))
                                 == validation[1]))
        if best is None or accuracy > best[0]:
            best = (accuracy, l2, params)
    accuracy, l2, params = best
    return {"l2": l2, "validation_accuracy": accuracy, "features": bow.num_features,
            "accuracy": float(np.mean(predict_logreg(params, sparse["test"], len(test[1]))
                                      == test[1]))}


def majority_tag(train: Sequence[dict], test: Sequence[dict]) -> dict[str, float]:
    """Most frequent training tag per word form; the overall most frequent for unseen words."""
    per_word: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    overall: collections.Counter = collections.Counter()
    for example in train:
        for word, tag in zip(example["words"], example["tags"]):
            per_word[word][tag] += 1
            overall[tag] += 1
    best = {w: c.most_common(1)[0][0] for w, c in per_word.items()}
    fallback = overall.most_common(1)[0][0]
    right = {True: 0, False: 0}
    total = {True: 0, False: 0}
    for example in test:
        for word, tag in zip(example["words"], example["tags"]):
            seen = word in best
            total[seen] += 1
            right[seen] += int(best.get(word, fallback) == tag)
    n = total[True] + total[False]
    return {"token_accuracy": (right[True] + right[False]) / max(n, 1),
            "seen_accuracy": right[True] / max(total[True], 1),
            "unseen_accuracy": right[False] / max(total[False], 1),
            "unseen_fraction": total[False] / max(n, 1), "words": n}


# ----------------------------------------------------------------------------- CLI


def _texts_labels(examples) -> tuple[list[str], np.ndarray]:
    items = [examples[i] for i in range(len(examples))]
    return [e["text"] for e in items], np.asarray([e["label"] for e in items], np.int32)


def run_task(task: str, *, test_split: str = "test") -> dict[str, dict]:
    """Every baseline of `task` on its splits (train, validation, `test_split`)."""
    from data.pipelines.finetune_datasets import get_dataset

    dataset = get_dataset(task)
    if task in TAG_TASKS:
        train, test = (dataset.examples(s) for s in ("train", test_split))
        return {"majority_tag": majority_tag([train[i] for i in range(len(train))],
                                             [test[i] for i in range(len(test))])}
    if dataset.kind != "classify":
        raise ValueError(f"no baseline for {task!r} (kind {dataset.kind})")
    train = _texts_labels(dataset.examples("train"))
    validation = _texts_labels(dataset.examples("validation"))
    test = _texts_labels(dataset.examples(test_split))
    return {"majority": majority(train[1], test[1]),
            "bow_logreg": bow_logreg(train, validation, test, dataset.num_labels)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.baselines",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="all", choices=[*CLASSIFY_TASKS, *TAG_TASKS, "all"],
                        help="the task, or 'all'")
    parser.add_argument("--split", default="test", help="the split the accuracy is reported on")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--workdir", help="write the run record (train/run_record.py) to "
                                          "DIR/record.json")
    started = time.time()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if args.workdir:
        from train import run_record
        try:
            run_record.own_folder(args.workdir, "baselines", "train.baselines")
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    tasks = CLASSIFY_TASKS + TAG_TASKS if args.task == "all" else (args.task,)
    results = {}
    for task in tasks:
        start = time.perf_counter()
        try:
            results[task] = run_task(task, test_split=args.split)
        except DataError as error:  # missing data, an unknown split: the message names the fix
            print(f"error: {error}", file=sys.stderr)
            return 2
        for name, values in results[task].items():
            shown = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                              for k, v in values.items())
            print(f"{task:12s} {name:13s} ({args.split}) {shown}")
        print(f"{task:12s} ({time.perf_counter() - start:.1f} s)", flush=True)
    if args.json:
        storage.write_atomically(storage.run_path(args.json), json.dumps(results, indent=2))
    if args.workdir:
        path = _write_record(args, results, ["python", "-m", "train.baselines", *argv], started)
        print(f"record: {path}")
    return 0


def _write_record(args, results: dict, command: list[str], started: float) -> epath.Path:
    from train import run_record

    session = run_record.session(command, started, None, None, "finished", None,
                                 "none (no MFU here)")
    config = {"task": args.task, "split": args.split, "l2_grid": list(L2_GRID)}
    record = run_record.make("baselines", config=config,
                             metrics={"eval": results, "eval_split": args.split},
                             sessions=[session], finished=True)
    return run_record.write(storage.run_path(args.workdir) / run_record.FILENAME, record)


if __name__ == "__main__":
    sys.exit(main())
