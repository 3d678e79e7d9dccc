"""Causal language modelling (GPT; Radford et al. 2018, 2019): next-token cross-entropy over
whole documents packed into rows, no attention across documents.

Data: data/pipelines/lm.py (documents `[EOS] + text + [EOS]` end to end, cut into rows of
`data.max_length` with one token of overlap, segment ids and restarting positions); the
vocabulary: a byte-level BPE trained on the training split (data/vocab/bpe.py), kept in the
run's workdir (train/vocabulary.py).

Objective: the mean negative log-likelihood per scored target token (a document's next token;
`weights`), summed per microbatch and divided by the whole batch's count
(`loss_normalizers`), so gradient accumulation is exact.

Evaluation, on `data.eval_split` (the first `task.eval_tokens` tokens of its stream; 0: all):
  nll, perplexity           nats per target token and exp of it (train/lm_metrics.py)
  bits_per_byte             nats / (ln 2 x UTF-8 bytes of the scored text): every target token
                            is one BPE token whose bytes are known (`token_bytes`), so this is
                            exact and comparable across tokenizers; the nats of predicting each
                            document's end-of-text token (0 bytes) count, as in the Kneser-Ney
                            baseline (train/kneser_ney.py), so both pay for knowing where a
                            document ends
  accuracy                  next-token argmax
at the training length, and the same with a suffix `_{L}` at every length of
`task.eval_lengths` (Press et al. 2022 evaluate a model trained on L tokens at longer L'): each
length scores the same target tokens of the same text, cut into rows of that length (the rows
overlap by one token, so nothing is scored twice or left out), so the numbers differ only by the
context the model sees.

Lengths past the training length with learned positions: the model is built with
`model.max_length` rows in its table, which must cover the longest eval length (a ConfigError
otherwise); training rows only ever use positions below `data.max_length`, so the rows past it
keep their initialisation (N(0, 0.02^2); shrunk by weight decay where the optimizer has any) and
a longer eval measures exactly that untrained table, honestly, rather than being left out. The
other encodings (sinusoidal, RoPE, ALiBi, T5, none) have no table limit.
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections
import numpy as np

from data.builders import sources
from data.pipelines import counts
from data.pipelines import lm as lm_data
from data.vocab import bpe
from models.decoder_lm import DecoderLM, DecoderLMConfig
from train import flops, lm_metrics, vocabulary
from train.config import ConfigError, check_choice, to_dataclass
from train.losses import cross_entropy
from train.run_config import Resolution
from train.tasks.base import Task

METRICS = ("nll", "nats_per_byte", "accuracy")  # summed on the devices; the rest derived


def _model_config(config: ml_collections.ConfigDict, vocab_size: int) -> DecoderLMConfig:
    section = config.model.copy_and_resolve_references()
    with section.unlocked():
        del section["name"]
    return to_dataclass(DecoderLMConfig, section, "model", vocab_size=vocab_size)


def _cached_vocabulary(config, saved):
    """The saved vocabulary, or the cached one; None when it must still be trained."""
    if saved is not None:
        return vocabulary.choose(saved, lambda: None, kind="bpe")
    data = config.data
    return bpe.cached(bpe.cache_name(data.name, data.source, data.text_key),
                      data.train_split, vocab_size=data.vocab_size)


def eval_lengths(config) -> tuple[int, ...]:
    """The lengths evaluated: data.max_length first, then task.eval_lengths' others."""
    lengths = [int(config.data.max_length)]
    for length in config.task.eval_lengths:
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ConfigError(f"config.task.eval_lengths={tuple(config.task.eval_lengths)}: "
                              f"{length!r} is not a positive number of tokens")
        if length not in lengths:
            lengths.append(length)
    return tuple(lengths)


def metric_name(name: str, length: int, train_length: int) -> str:
    """'nll' at the training length, 'nll_512' at 512 (module docstring)."""
    return name if length == train_length else f"{name}_{length}"


class CausalLMTask(Task):
    """A decoder-only LM (models/decoder_lm.py) on a corpus of whole documents."""

    TASK_KEYS = Task.TASK_KEYS + ("eval_tokens", "eval_lengths")
    DATA_KEYS = Task.DATA_KEYS + ("name", "text_key", "max_length", "vocab_size")

    vocabulary_settings = ("data.vocab_size",)

    def __init__(self, config: ml_collections.ConfigDict, saved_vocabulary=None):
        check_choice(config, "model.name", ("decoder_lm",))
        check_choice(config, "data.source", sources.SOURCE_KINDS)
        self.config = config
        self.max_length = int(config.data.max_length)
        if self.max_length < 1:
            raise ConfigError(f"config.data.max_length={self.max_length} must be >= 1")
        if config.task.eval_tokens < 0:
            raise ConfigError(f"config.task.eval_tokens={config.task.eval_tokens} must be >= 0 "
                              "(0: the whole eval split)")
        self.lengths = eval_lengths(config)
        self.tokenizer = vocabulary.choose(
            saved_vocabulary, lambda: bpe.load_or_train_for_dataset(
                config.data.name, config.data.train_split, vocab_size=config.data.vocab_size,
                key=config.data.text_key, source=config.data.source),
            kind="bpe")
        self.model_config = _model_config(config, self.tokenizer.vocab_size)
        cfg = self.model_config
        if cfg.posemb == "learned" and max(self.lengths) > cfg.max_length:
            raise ConfigError(
                f"the longest evaluated length {max(self.lengths)} (data.max_length, "
                f"task.eval_lengths) exceeds config.model.max_length={cfg.max_length}, the rows "
                "of the learned position table: raise config.model.max_length to at least "
                f"{max(self.lengths)} (the rows past data.max_length stay untrained and are "
                "measured as such) or drop the longer eval lengths")
        self.model = DecoderLM(cfg)
        self.d_model = cfg.d_model
        self.token_bytes = np.asarray(self.tokenizer.token_bytes, np.float32)
        self._eval_rows = None

    @staticmethod
    def datasets(config) -> tuple[str, ...]:
        return (config.data.name,) if config.data.source == "local" else ()

    @classmethod
    def plan(cls, config, saved_vocabulary=None) -> Resolution:
        """The model with the vocabulary's size when it needs no training (saved or cached);
        else the size is pending (BPE stops early when the texts run out of pairs)."""
        tokenizer = _cached_vocabulary(config, saved_vocabulary)
        if tokenizer is not None:
            return Resolution(_model_config(config, tokenizer.vocab_size))
        return Resolution(_model_config(config, config.data.vocab_size), pending={
            "model.vocab_size": f"the size of the byte-level BPE vocabulary trained on "
                                f"{config.data.name} {config.data.train_split} when the run "
                                f"starts, at most config.data.vocab_size={config.data.vocab_size}"})

    # ---- model -----------------------------------------------------------------------------
    def dummy_inputs(self, batch_size: int) -> dict[str, np.ndarray]:
        return {"tokens": np.ones((batch_size, self.max_length), np.int32)}

    def init_variables(self, rng, inputs):
        return self.model.init({"params": rng}, inputs["tokens"], train=False)

    def flops_per_example(self) -> float:
        return flops.decoder_lm_train_flops_per_example(self.model_config, self.max_length)

    def _logits(self, params, batch, *, train: bool, rng=None):
        return self.model.apply({"params": params}, batch["tokens"],
                                segment_ids=batch["segment_ids"], positions=batch["positions"],
                                train=train, rngs=None if rng is None else {"dropout": rng})

    def _sums(self, logits, batch) -> dict[str, tuple]:
        """{'nll', 'nats_per_byte', 'accuracy'}: (sum, count) over the scored targets."""
        weights = batch["weights"]
        targets = batch["targets"]
        nll = cross_entropy(logits, targets) * weights
        token_bytes = jnp.asarray(self.token_bytes)[targets] * weights
        correct = (jnp.argmax(logits, -1) == targets) * weights
        count = weights.sum()
        return {"nll": (nll.sum(), count), "nats_per_byte": (nll.sum(), token_bytes.sum()),
                "accuracy": (correct.sum(), count)}

    # ---- pure functions the trainer jits ---------------------------------------------------
    def loss_normalizers(self, batch):
        """The loss is a mean over the whole batch's scored target tokens."""
        return {"cross_entropy": batch["weights"].sum()}

    def loss_fn(self, params, batch, rng):
        logits = self._logits(params, batch, train=True, rng=rng)
        sums = self._sums(logits, batch)
        return {"cross_entropy": sums["nll"][0]}, {"nll": sums["nll"],
                                                   "accuracy": sums["accuracy"]}

    def eval_fn(self, params, batch):
        """The sums at this batch's length, and (0, 0) under every other evaluated length's
        names: every eval batch returns the same names, whichever length it holds."""
        length = batch["tokens"].shape[1]
        if length not in self.lengths:
            raise ValueError(f"an eval batch of length {length}; evaluated: {self.lengths}")
        sums = self._sums(self._logits(params, batch, train=False), batch)
        zero = (jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32))
        return {metric_name(name, n, self.max_length): sums[name] if n == length else zero
                for n in self.lengths for name in METRICS}

    def derived_metrics(self, values: dict[str, float]) -> dict[str, float]:
        for length in self.lengths:
            nll = metric_name("nll", length, self.max_length)
            if nll in values:
                values[metric_name("perplexity", length, self.max_length)] = (
                    lm_metrics.perplexity(values[nll]))
            per_byte = metric_name("nats_per_byte", length, self.max_length)
            if per_byte in values:
                values[metric_name("bits_per_byte", length, self.max_length)] = (
                    lm_metrics.bits_per_byte(values.pop(per_byte)))
        if self.max_length in self.config.task.eval_lengths:  # the ablation's uniform names
            for name in ("perplexity", "bits_per_byte", "nll", "accuracy"):
                if name in values:
                    values[f"{name}_{self.max_length}"] = values[name]
        return values

    # ---- data --------------------------------------------------------------------------------
    def _source(self, split: str):
        return sources.get_data_source(self.config.data.name, split,
                                       source=self.config.data.source)

    def train_iterator(self, *, batch_size: int, seed: int, process_index: int,
                       process_count: int):
        data = self.config.data
        return lm_data.lm_train_batches(
            self._source(data.train_split), self.tokenizer, batch_size=batch_size,
            max_length=self.max_length, seed=seed, key=data.text_key,
            process_index=process_index, process_count=process_count)

    def data_metrics(self, train_iterator) -> dict[str, int]:
        return {"documents": counts.long_example_counts(train_iterator)["examples"]}

    def eval_rows(self) -> list[dict[str, np.ndarray]]:
        """The eval text cut into rows at every evaluated length (tokenized once per task)."""
        if self._eval_rows is None:
            stream = lm_data.document_stream(
                self._source(self.config.data.eval_split), self.tokenizer,
                key=self.config.data.text_key, max_tokens=int(self.config.task.eval_tokens))
            self._eval_rows = [lm_data.eval_rows(stream, n, self.tokenizer.pad_id)
                               for n in self.lengths]
        return self._eval_rows

    def eval_batches(self, *, batch_size: int, process_index: int, process_count: int):
        return lm_data.lm_eval_batches(self.eval_rows(), batch_size=batch_size,
                                       process_index=process_index, process_count=process_count)

