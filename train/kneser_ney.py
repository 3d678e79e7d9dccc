"""An interpolated Kneser-Ney n-gram model: the count-based baseline a neural LM must beat.

    python -m train.kneser_ney --config configs/lm/english.py --workdir workdirs/lm_kneser_ney

Chen & Goodman 1998 ("An Empirical Study of Smoothing Techniques for Language Modeling", TR-10-98),
interpolated Kneser-Ney (Kneser & Ney 1995), for a word w after the history h of n - 1 tokens:

    P_k(w | h) = max(c_k(h w) - D_k(c_k(h w)), 0) / c_k(h .)  +  gamma_k(h) P_{k-1}(w | h')
    gamma_k(h) = (D_k(1) N_1(h .) + D_k(2) N_2(h .) + D_k(3+) N_3+(h .)) / c_k(h .)

h' is h without its first token; P_0 is uniform over the V tokens. At the highest order c_n is
the raw count; at every lower order it is the continuation count N_1+(. g), the number of
distinct tokens seen before g (Kneser & Ney's insight: a unigram's weight in a backoff is how
many contexts it completes, not how often it occurs). c_k(h .) is the sum of c_k(h w) over w and
N_r(h .) the number of w with c_k(h w) = r (r = 3+: at least 3). A history never seen
(c_k(h .) = 0) backs off wholly: P_k = P_{k-1}. So every level sums to 1 over the vocabulary.

Discounts, estimated per order from the counts of counts n_r of that order's c_k
(Y = n_1 / (n_1 + 2 n_2)):
  'modified'  Chen & Goodman's modified Kneser-Ney (Sec. 3, eq. 26): D(1) = 1 - 2 Y n_2/n_1,
              D(2) = 2 - 3 Y n_3/n_2, D(3+) = 3 - 4 Y n_4/n_3 (their best smoother);
  'single'    one D = Y for every count (Ney, Essen & Kneser 1994; Chen & Goodman's
              "interpolated Kneser-Ney").

Data, as the causal LM sees it (data/pipelines/lm.py): each document is [EOS] + tokens + [EOS]
with n - 2 more EOS before it as history padding; every token after the first EOS is predicted
(the document's tokens and its final EOS), exactly the targets the LM is scored on, so the two
perplexities and bits per byte (train/lm_metrics.py) are over the same tokens of the same text.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time

import numpy as np

DISCOUNTS = ("modified", "single")


def discounts_from_counts(counts: np.ndarray, kind: str) -> tuple[float, float, float]:
    """(D(1), D(2), D(3+)) from the counts of counts of `counts` (module docstring).
    ValueError when the counts lack the counts of counts the estimate divides by."""
    if kind not in DISCOUNTS:
        raise ValueError(f"discounts={kind!r} is not one of {list(DISCOUNTS)}")
    n = [int(np.sum(counts == r)) for r in range(5)]  # n[r]: grams seen exactly r times
    needed = (1, 2) if kind == "single" else (1, 2, 3, 4)
    if any(n[r] == 0 for r in needed):
        raise ValueError(f"{kind} Kneser-Ney discounts need n-grams seen {needed} times; "
                         f"counts of counts {n[1:]}: too little text for this order; use more "
                         "text, a lower --order, or --discounts single (which needs n-grams "
                         "seen once and twice only)")
    y = n[1] / (n[1] + 2 * n[2])
    if kind == "single":
        return (y, y, y)
    return (1 - 2 * y * n[2] / n[1], 2 - 3 * y * n[3] / n[2], 3 - 4 * y * n[4] / n[3])


@dataclasses.dataclass
class _Level:
    """One order k: its k-grams' keys (sorted) and counts c_k; its histories' keys (sorted),
    c_k(h .) and N_1, N_2, N_3+ (h .); its discounts."""

    gram_keys: np.ndarray
    gram_counts: np.ndarray
    hist_keys: np.ndarray
    hist_totals: np.ndarray
    hist_gamma_numerators: np.ndarray
    discounts: tuple[float, float, float]


def _lookup(keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """values[i] where keys[i] == query, 0 where the query is absent (keys sorted)."""
    where = np.clip(np.searchsorted(keys, queries), 0, max(len(keys) - 1, 0))
    if not len(keys):
        return np.zeros(len(queries), values.dtype)
    return np.where(keys[where] == queries, values[where], 0)


class KneserNey:
    """An interpolated Kneser-Ney model of `order` over token ids < `vocab_size` (module
    docstring); `vocabulary` the ids it distributes probability over (default all)."""

    def __init__(self, sequences, *, order: int = 3, vocab_size: int,
                 discounts: str | tuple[float, float, float] = "modified", vocabulary=None):
        if order < 1:
            raise ValueError(f"order={order} must be >= 1")
        if vocab_size ** order >= 2 ** 62:
            raise ValueError(f"vocab_size={vocab_size} ** order={order} n-gram keys do not fit "
                             "int64: use a lower --order or a smaller vocabulary")
        self.order, self.base = order, int(vocab_size)
        self.num_tokens = vocab_size if vocabulary is None else len(vocabulary)
        grams = [self._grams(np.asarray(s, np.int64), order) for s in sequences]
        keys = np.concatenate(grams) if grams else np.zeros(0, np.int64)
        top_keys, top_counts = np.unique(keys, return_counts=True)
        self.levels: list[_Level] = [None] * order  # type: ignore[list-item]
        gram_keys, gram_counts = top_keys, top_counts
        for k in range(order, 0, -1):
            self.levels[k - 1] = self._level(gram_keys, gram_counts, k, discounts)
            # continuation counts of the (k-1)-grams: distinct tokens before each
            if k > 1:
                gram_keys, gram_counts = np.unique(gram_keys % self.base ** (k - 1),
                                                   return_counts=True)

    def _grams(self, tokens: np.ndarray, k: int) -> np.ndarray:
        """Keys of every k-gram of `tokens`: sum of token_j * base^(k-1-j)."""
        if len(tokens) < k:
            return np.zeros(0, np.int64)
        key = np.zeros(len(tokens) - k + 1, np.int64)
        for j in range(k):
            key = key * self.base + tokens[j: len(tokens) - k + 1 + j]
        return key

    def _level(self, keys, counts, k, discounts) -> _Level:
        d = (discounts_from_counts(counts, discounts) if isinstance(discounts, str)
             else tuple(float(x) for x in discounts))
        hist = keys // self.base  # the history's key: the gram without its last token
        hist_keys, inverse = np.unique(hist, return_inverse=True)
        totals = np.bincount(inverse, weights=counts, minlength=len(hist_keys))
        per_gram = np.select([counts == 1, counts == 2], [d[0], d[1]], d[2])
        numerators = np.bincount(inverse, weights=per_gram, minlength=len(hist_keys))
        return _Level(keys, counts, hist_keys, totals, numerators, d)

    def probabilities(self, histories: np.ndarray, words: np.ndarray) -> np.ndarray:
        """P(word | history) float64 [m] for histories int [m, order - 1] (the last order - 1
        tokens before each word) and words int [m]."""
        histories = np.asarray(histories, np.int64).reshape(len(words), self.order - 1)
        words = np.asarray(words, np.int64)
        p = np.full(len(words), 1.0 / self.num_tokens)
        hist_key = np.zeros(len(words), np.int64)
        for k in range(1, self.order + 1):
            level = self.levels[k - 1]
            if k > 1:  # the history grows by one token to the left
                hist_key = hist_key + histories[:, self.order - k] * self.base ** (k - 2)
            gram = hist_key * self.base + words
            count = _lookup(level.gram_keys, level.gram_counts, gram).astype(np.float64)
            total = _lookup(level.hist_keys, level.hist_totals, hist_key)
            gamma = _lookup(level.hist_keys, level.hist_gamma_numerators, hist_key)
            discount = np.select([count == 0, count == 1, count == 2],
                                 [0.0, level.discounts[0], level.discounts[1]],
                                 level.discounts[2])
            seen = total > 0
            safe = np.where(seen, total, 1.0)
            p = np.where(seen, (np.maximum(count - discount, 0.0) + gamma * p) / safe, p)
        return p

    def score(self, sequences) -> tuple[float, int]:
        """(total nats, predicted tokens) of `sequences`, each already padded with the
        `history_length(order)` tokens it starts from: every token after them is predicted."""
        nats, tokens = 0.0, 0
        skip, width = history_length(self.order), self.order - 1
        for s in sequences:
            s = np.asarray(s, np.int64)
            m = len(s) - skip
            if m <= 0:
                continue
            first = skip - width
            histories = np.stack([s[first + j: first + j + m] for j in range(width)], axis=1) \
                if width else np.zeros((m, 0), np.int64)
            nats -= float(np.sum(np.log(self.probabilities(histories, s[skip:]))))
            tokens += m
        return nats, tokens


def history_length(order: int) -> int:
    """Tokens before a document's first predicted one: order - 1 of history, at least the
    document's own first EOS."""
    return max(order - 1, 1)


def padded_documents(documents, eos_id: int, order: int):
    """Each document's token ids as the LM reads it, [EOS] + ids + [EOS], after order - 2 more
    EOS of history (module docstring)."""
    pad = [eos_id] * history_length(order)
    return [np.asarray([*pad, *ids, eos_id], np.int64) for ids in documents]


# ----------------------------------------------------------------------------- the command


def evaluate(config, *, order: int, discounts: str) -> dict:
    """Trains on config.data.train_split, scores config.data.eval_split: the numbers a record
    keeps."""
    from data.builders.examples import as_text
    from data.builders.sources import get_data_source
    from data.vocab import bpe
    from train import lm_metrics

    data = config.data
    tok = bpe.load_or_train_for_dataset(data.name, data.train_split, vocab_size=data.vocab_size,
                                        key=data.text_key, source=data.source)

    def documents(split):
        source = get_data_source(data.name, split, source=data.source)
        return tok.encode_batch([as_text(source[i][data.text_key]) for i in range(len(source))])

    start = time.perf_counter()
    train = padded_documents(documents(data.train_split), tok.eos_id, order)
    vocabulary = [i for i in range(tok.vocab_size) if i != tok.pad_id]  # pad is never predicted
    model = KneserNey(train, order=order, vocab_size=tok.vocab_size, discounts=discounts,
                      vocabulary=vocabulary)
    fitted = time.perf_counter() - start
    evaluation = padded_documents(documents(data.eval_split), tok.eos_id, order)
    limit = int(config.task.eval_tokens)
    if limit:  # the LM scores the first eval_tokens tokens of the stream [EOS] + ids + [EOS] ...
        evaluation = _first_tokens(evaluation, limit, order)
    nats, tokens = model.score(evaluation)
    if not tokens:  # as the LM's eval stream refuses it (data/pipelines/lm.py)
        from data.errors import DataError
        raise DataError(f"config.task.eval_tokens={limit}: the first {limit} token(s) of "
                        f"{data.eval_split} leave nothing to score (a target needs a token "
                        "before it): raise it, or 0 for the whole split")
    skip = history_length(order)
    scored_bytes = int(sum(tok.token_bytes[np.asarray(s[skip:])].sum() for s in evaluation))
    return {"order": order, "discounts": discounts,
            "discount_values": [list(level.discounts) for level in model.levels],
            "nll": nats / tokens, "perplexity": lm_metrics.perplexity(nats / tokens),
            "bits_per_byte": lm_metrics.bits_per_byte(nats / scored_bytes),
            "tokens": tokens, "bytes": scored_bytes, "vocab_size": tok.vocab_size,
            "train_tokens": int(sum(len(s) - skip for s in train)), "fit_seconds": fitted}


def _first_tokens(sequences, limit: int, order: int):
    """The padded documents cut to the first `limit` tokens of the stream of documents [EOS] +
    ids + [EOS] (the history padding before each not counted), as the LM's eval cuts it."""
    out, left, skip = [], limit, history_length(order) - 1
    for s in sequences:
        body = s[skip:]  # [EOS] + ids + [EOS]
        if left <= 0:
            break
        out.append(np.concatenate([s[:skip], body[:left]]))
        left -= len(body)
    return out


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[tuple[str, str]]]:
    """The options, and the `--config.KEY=VALUE` overrides of the LM config (applied as
    `python -m train` applies them, so both read the same data and vocabulary)."""
    parser = argparse.ArgumentParser(prog="python -m train.kneser_ney",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True,
                        help="the LM config whose data and vocabulary to use (FILE.py[:ARG])")
    parser.add_argument("--order", type=int, default=3, help="n of the n-gram (default 3)")
    parser.add_argument("--discounts", default="modified", choices=DISCOUNTS)
    parser.add_argument("--workdir", help="write the run record to DIR/record.json")
    args, rest = parser.parse_known_args(argv)
    if not 1 <= args.order <= 61:  # a key of order n-grams needs vocab ** n < 2 ** 62, vocab >= 2
        parser.error(f"--order {args.order} must be in [1, 61] (n-gram keys are int64)")
    overrides = []
    for item in rest:
        if not item.startswith("--config.") or "=" not in item:
            parser.error(f"unrecognised argument {item!r}; overrides look like "
                         "--config.data.vocab_size=4096")
        key, _, value = item[len("--config."):].partition("=")
        overrides.append((key, value))
    return args, overrides


def main(argv: list[str] | None = None) -> int:
    started = time.time()
    argv = sys.argv[1:] if argv is None else list(argv)
    args, overrides = parse_args(argv)
    from data.errors import DataError
    from train.config import ConfigError, apply_override, load_config_file

    try:
        if args.workdir:
            from train import run_record
            run_record.own_folder(args.workdir, "baselines", "train.kneser_ney")
        config = load_config_file(args.config)
        for key, value in overrides:
            apply_override(config, key, value)
        task = config.get("task", {}).get("name")
        if task != "causal_lm":
            raise ConfigError(f"{args.config} is not a language model's config (task {task!r}): "
                              "the baseline scores a causal LM's data and vocabulary, e.g. "
                              "configs/lm/english.py")
        if config.data.vocab_size ** args.order >= 2 ** 62:  # before the documents are read
            raise ConfigError(f"--order {args.order} with config.data.vocab_size="
                              f"{config.data.vocab_size}: the n-gram keys do not fit int64; use "
                              "a lower --order or a smaller vocabulary")
        if config.data.source == "local":  # named with its fetch command, as a start does
            from data import fetched
            fetched.require([config.data.name])
        results = evaluate(config, order=args.order, discounts=args.discounts)
    except (DataError, ConfigError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{args.order}-gram Kneser-Ney ({args.discounts}) on {config.data.name} "
          f"{config.data.eval_split}: perplexity {results['perplexity']:.2f}, bits per byte "
          f"{results['bits_per_byte']:.4f} over {results['tokens']:,} tokens "
          f"({results['bytes']:,} bytes)")
    if args.workdir:
        from train import run_record, storage

        session = run_record.session(["python", "-m", "train.kneser_ney", *argv], started,
                                     None, None, "finished", None, "none (no MFU here)")
        record = run_record.make(
            "baselines", config={"config": args.config, "order": args.order,
                                 "discounts": args.discounts, "data": config.data.to_dict()},
            metrics={"eval": results, "eval_split": config.data.eval_split},
            sessions=[session], finished=True)
        path = run_record.write(storage.run_path(args.workdir) / run_record.FILENAME, record)
        print(f"record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
