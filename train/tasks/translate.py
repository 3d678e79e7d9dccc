"""Translation (Vaswani et al. 2017): label-smoothed cross-entropy per target token, BLEU by beam
search.

Training rows are packed (several sentence pairs per row, attention never crossing them);
evaluation rows hold one pair each. Metrics: `loss` (label-smoothed, what is optimised),
`nll` (plain cross-entropy per target token) and its `perplexity` = exp(nll) (the paper's PPL
per wordpiece), `accuracy` (next-token, teacher-forced). At the end (and every
`task.decode_every` steps) the eval split is translated with beam search and scored with
sacrebleu (`bleu`, detokenized text, the standard 13a tokenization); a few samples are logged.

Initialisation (`config.init`, train/translate_init.py): 'scratch', a Hugging Face Marian
folder with its tokenizer, or an earlier translation workdir, whose weights replace the random
ones in `init_variables` and whose vocabulary the run tokenizes with.
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections
import numpy as np

from data.vocab import sentencepiece as sentencepiece_vocab
from data.builders import sources
from data.pipelines import counts
from data.pipelines import translation as text_data
from data.pipelines.sharding import num_batches
from data.builders.examples import as_text
from models import decode as decoding
from models.transformer import (PAD_ID, Transformer, TransformerConfig, shift_right,
                                with_layer_layout)
from train import flops, vocabulary
from train.config import ConfigError, check_choice, to_dataclass
from train.losses import cross_entropy
from train.pretrained_params import put_pretrained
from train.run_config import Resolution
from train.tasks.base import Task
from train.translate_init import TranslationInit, resolve_init

# Position encodings that read a table with `model.max_length` rows.
TABLE_POSEMBS = ("sinusoidal", "learned")


def _model_config(config: ml_collections.ConfigDict, init: TranslationInit,
                  vocab_size: int) -> TransformerConfig:
    """config.model's Transformer (scratch) or config.init's; its vocabulary of `vocab_size`."""
    if init.model_config is not None:
        if init.model_config.vocab_size != vocab_size:
            raise ConfigError(f"config.init={config.init!r}: its model has "
                              f"{init.model_config.vocab_size} token ids, its vocabulary "
                              f"{vocab_size} pieces")
        return init.model_config
    model_section = config.model.copy_and_resolve_references()
    with model_section.unlocked():
        del model_section["name"]
    return to_dataclass(TransformerConfig, model_section, "model", vocab_size=vocab_size)


def bleu(hypotheses: list[str], references: list[str]) -> float:
    """Corpus BLEU (Papineni et al. 2002) of detokenized text, as sacrebleu reports it."""
    import sacrebleu

    return float(sacrebleu.corpus_bleu(hypotheses, [references]).score)


def decode_width(cfg: TransformerConfig, max_length: int, extra: int, cap: int) -> int:
    """The length of a translation run's decoded arrays: the longest any sentence may run (each
    stops at its own input length + `extra` = task.extra_decode_length, Sec. 6.1; inputs of
    at most `max_length` = data.max_length tokens), at most `cap` = task.max_decode_length
    (if > 0) and the position table of `cfg`.

    Sequences must fit the position table (issue: a row longer than the table would read
    past it: silently clamped by a gather), so a data.max_length or an explicit cap longer
    than the table fails; the paper's rule alone (cap 0) stops at the table's end.
    """
    width = max_length + extra
    if cap:
        width = min(width, cap)
    if cfg.posemb not in TABLE_POSEMBS:
        return width
    for key, length in (("data.max_length", max_length),
                        ("task.max_decode_length", cap)):
        if length > cfg.max_length:
            raise ConfigError(
                f"config.{key}={length} is longer than the position table "
                f"(config.model.max_length={cfg.max_length}, posemb={cfg.posemb!r}); raise "
                f"config.model.max_length to at least {length} or shorten config.{key}")
    return min(width, cfg.max_length)


def translate(model: Transformer, params, inputs, tokenizer, *, beam_size: int, alpha: float,
              extra: int, max_decode_length: int):
    """The translations [b, max_decode_length] (EOS included, padding after) of `inputs` [b, s]
    (ids ending in EOS, padded): beam search with length penalty `alpha` (greedy for
    `beam_size` 1), each sentence up to its input length + `extra` tokens (Sec. 6.1), EOS
    counted on both sides. The task's eval decoding and `python -m train.predict` both call it."""
    limits = decoding.input_length_limits(inputs, extra, max_decode_length)
    tokens, _ = decoding.predict(
        model, params, inputs, beam_size=beam_size, alpha=alpha,
        max_decode_len=max_decode_length, row_max_decode_len=limits, eos_id=tokenizer.eos_id,
        bos_id=model.config.start_id(tokenizer.bos_id))
    return tokens


class TranslationTask(Task):
    """An encoder-decoder Transformer on a parallel corpus (source_key -> target_key)."""

    TASK_KEYS = Task.TASK_KEYS + ("label_smoothing", "beam_size", "length_penalty",
                                  "max_decode_length", "extra_decode_length", "decode_every",
                                  "num_samples")
    DATA_KEYS = Task.DATA_KEYS + ("name", "source_key", "target_key", "max_length", "pack",
                                  "long_examples", "vocab_size", "vocab_model_type",
                                  "worker_count")

    def __init__(self, config: ml_collections.ConfigDict, saved_vocabulary=None):
        check_choice(config, "model.name", ("transformer",))
        check_choice(config, "data.source", sources.SOURCE_KINDS)
        check_choice(config, "data.long_examples", text_data.LONG_EXAMPLE_POLICIES)
        check_choice(config, "data.vocab_model_type", sentencepiece_vocab.MODEL_TYPES)
        self.config = config
        task = config.task
        self.label_smoothing = float(task.label_smoothing)
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"config.task.label_smoothing={self.label_smoothing} must be in [0, 1)")
        if task.beam_size < 1:
            raise ConfigError(f"config.task.beam_size={task.beam_size} must be >= 1 (1: greedy)")
        if task.decode_every < 0:
            raise ConfigError(f"config.task.decode_every={task.decode_every} must be >= 0 "
                              "(0: translate the eval split only at the end)")
        self.decode_every = int(task.decode_every)
        self.max_length = int(config.data.max_length)
        if self.max_length < 2:
            raise ConfigError(f"config.data.max_length={self.max_length} must be >= 2 (a token "
                              "and EOS)")
        for key in ("max_decode_length", "extra_decode_length"):
            if task[key] < 0:
                raise ConfigError(f"config.task.{key}={task[key]} must be >= 0")
        self.extra_decode_length = int(task.extra_decode_length)

        self.init = resolve_init(config, build=True)
        if self.init.tokenizer is None:  # scratch: trained on the run's texts
            self.tokenizer = vocabulary.choose(
                saved_vocabulary, lambda: sentencepiece_vocab.load_or_train_for_dataset(
                    config.data.name, split=config.data.train_split, source=config.data.source,
                    keys=(config.data.source_key, config.data.target_key),
                    vocab_size=config.data.vocab_size, model_type=config.data.vocab_model_type),
                kind="sentencepiece")
            self.vocabulary_settings = ("data.vocab_size", "data.vocab_model_type")
        else:  # the checkpoint's own, which a resumed run must still be using
            self.tokenizer = vocabulary.choose(
                saved_vocabulary, lambda: self.init.tokenizer, kind="sentencepiece",
                requested=self.init.tokenizer, where=f"the vocabulary of config.init="
                                                     f"{config.init!r}")
        self.model_config = _model_config(config, self.init, self.tokenizer.vocab_size)
        self.max_decode_length = self._decode_width(int(task.max_decode_length))
        self.model = Transformer(self.model_config)
        self.d_model = self.model_config.d_model

    @staticmethod
    def datasets(config) -> tuple[str, ...]:
        return (config.data.name,) if config.data.source == "local" else ()

    @classmethod
    def plan(cls, config, saved_vocabulary=None) -> Resolution:
        """The vocabulary's size needs no training: a SentencePiece model has exactly
        data.vocab_size pieces (sentencepiece_vocab.load_model_file checks it), a saved one
        was trained with the same setting (train/vocabulary.py checks it), and config.init's
        is read from its files (no weights read)."""
        init = resolve_init(config, build=False)
        saved = vocabulary.choose(saved_vocabulary, lambda: init.tokenizer, kind="sentencepiece")
        vocab_size = config.data.vocab_size if saved is None else saved.vocab_size
        return Resolution(_model_config(config, init, vocab_size), notes=init.notes)

    def resolution(self) -> Resolution:
        return Resolution(self.model_config, notes=self.init.notes)

    def _decode_width(self, cap: int) -> int:
        return decode_width(self.model_config, self.max_length, self.extra_decode_length, cap)

    # ---- model -----------------------------------------------------------------------------
    def dummy_inputs(self, batch_size: int) -> dict[str, np.ndarray]:
        tokens = np.ones((batch_size, self.max_length), np.int32)
        return {"inputs": tokens, "targets": tokens}

    def init_variables(self, rng, inputs):
        variables = self.model.init({"params": rng}, inputs["inputs"], inputs["targets"],
                                    train=False)
        if self.init.params is None:
            return variables
        loaded = with_layer_layout(self.init.params, self.model_config.scan_layers)
        return {**variables, "params": put_pretrained(
            variables["params"], loaded, what=f"the weights of config.init={self.config.init!r}")}

    def flops_per_example(self) -> float:
        return flops.transformer_train_flops_per_example(self.model_config, self.max_length,
                                                         self.max_length)

    def _logits(self, params, batch, *, train: bool, rng=None):
        segmentation = batch.get("targets_segmentation")
        cfg = self.model_config
        decoder_inputs = shift_right(batch["targets"], cfg.start_id(self.tokenizer.bos_id),
                                     segmentation, decoder_start=cfg.decoder_start)
        return self.model.apply(
            {"params": params}, batch["inputs"], decoder_inputs,
            inputs_segmentation=batch.get("inputs_segmentation"),
            targets_segmentation=segmentation,
            inputs_positions=batch.get("inputs_position"),
            targets_positions=batch.get("targets_position"),
            train=train, rngs=None if rng is None else {"dropout": rng})

    def _metric_sums(self, logits, targets, weights, label_smoothing):
        """{'loss', 'nll', 'accuracy'} as (sum, number of target tokens)."""
        smoothed = cross_entropy(logits, targets, label_smoothing) * weights
        nll = smoothed if label_smoothing == 0.0 else cross_entropy(logits, targets) * weights
        correct = (jnp.argmax(logits, -1) == targets) * weights
        count = weights.sum()
        return smoothed.sum(), count, {"loss": (smoothed.sum(), count), "nll": (nll.sum(), count),
                                       "accuracy": (correct.sum(), count)}

    # ---- pure functions the trainer jits ---------------------------------------------------
    def loss_normalizers(self, batch):
        """The loss is normalised per real target token (Sec. 5.4)."""
        return {"cross_entropy": (batch["targets"] != PAD_ID).sum().astype(jnp.float32)}

    def loss_fn(self, params, batch, rng):
        """Label-smoothed cross-entropy summed over real target tokens; `nll` and `accuracy`
        per target token."""
        logits = self._logits(params, batch, train=True, rng=rng)
        weights = (batch["targets"] != PAD_ID).astype(jnp.float32)
        loss_sum, _, metrics = self._metric_sums(logits, batch["targets"], weights,
                                                 self.label_smoothing)
        del metrics["loss"]  # the train step logs its objective, this mean, as `loss`
        return {"cross_entropy": loss_sum}, metrics

    def eval_fn(self, params, batch):
        logits = self._logits(params, batch, train=False)
        weights = (batch["targets"] != PAD_ID).astype(jnp.float32) * batch["mask"][:, None]
        _, _, metrics = self._metric_sums(logits, batch["targets"], weights, self.label_smoothing)
        return metrics

    def derived_metrics(self, values: dict[str, float]) -> dict[str, float]:
        if "nll" in values:
            values["perplexity"] = float(np.exp(min(values["nll"], 50.0)))
        return values

    def predict_fn(self, params, batch):
        """Beam search (greedy for beam_size 1) translations of one eval batch, each sentence
        up to its input length + task.extra_decode_length tokens (Sec. 6.1), EOS counted on
        both sides, within `max_decode_length`."""
        tokens = translate(self.model, params, batch["inputs"], self.tokenizer,
                           beam_size=self.config.task.beam_size,
                           alpha=self.config.task.length_penalty, extra=self.extra_decode_length,
                           max_decode_length=self.max_decode_length)
        return {"tokens": tokens, "index": batch["index"], "mask": batch["mask"]}

    def score_predictions(self, outputs: list[dict], log) -> dict[str, float]:
        """BLEU of the detokenized translations against the raw reference sentences."""
        source = self._source(self.config.data.eval_split)
        keys = self.config.data.source_key, self.config.data.target_key
        hypotheses, references, sources_text = [], [], []
        for out in outputs:
            for tokens, index, real in zip(out["tokens"], out["index"], out["mask"]):
                if not real:
                    continue
                example = source[int(index)]
                sources_text.append(as_text(example[keys[0]]))
                references.append(as_text(example[keys[1]]))
                hypotheses.append(self.tokenizer.decode(np.asarray(tokens).tolist()))
        for i in range(min(self.config.task.num_samples, len(hypotheses))):
            log(f"sample {i}: source    {sources_text[i]}\n"
                f"          reference {references[i]}\n"
                f"          output    {hypotheses[i]}")
        return {"bleu": bleu(hypotheses, references), "decoded": len(hypotheses)}

    # ---- data --------------------------------------------------------------------------------
    def _source(self, split: str):
        return sources.get_data_source(self.config.data.name, split,
                                       source=self.config.data.source)

    def _pipeline_args(self) -> dict:
        data = self.config.data
        return dict(tokenizer=self.tokenizer, source_key=data.source_key,
                    target_key=data.target_key, max_length=self.max_length)

    def train_iterator(self, *, batch_size: int, seed: int, process_index: int, process_count: int):
        data = self.config.data
        return text_data.translation_batches(
            self._source(data.train_split), batch_size=batch_size, train=True, seed=seed,
            pack=data.pack, long_examples=data.long_examples, process_index=process_index,
            process_count=process_count, worker_count=data.worker_count, **self._pipeline_args())

    def data_metrics(self, train_iterator) -> dict[str, int]:
        return counts.long_example_counts(train_iterator)

    def eval_batches(self, *, batch_size: int, process_index: int, process_count: int):
        source = self._source(self.config.data.eval_split)
        iterator = text_data.translation_batches(
            source, batch_size=batch_size, train=False, seed=0, pack=False,
            long_examples="truncate", process_index=process_index, process_count=process_count,
            **self._pipeline_args())
        return iterator, num_batches(len(source), batch_size=batch_size,
                                               process_count=process_count)
