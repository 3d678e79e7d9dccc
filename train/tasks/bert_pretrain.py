"""BERT pretraining (Devlin et al. 2019, Sec. 3.1 and App. A.2): masked LM + next sentence.

The loss is the mean MLM cross-entropy over the predicted positions plus the mean NSP
cross-entropy over the sequences (BERT's `get_masked_lm_output` / `get_next_sentence_output`),
each a mean over the whole batch (with gradient accumulation too: the train step divides by
the counts of the whole batch); without NSP (RoBERTa's formats) only the first term. Metrics
are kept apart: `mlm_loss` / `mlm_accuracy` per predicted token, `nsp_loss` / `nsp_accuracy`
per sequence, `nsp_random_fraction` (the share of sequences whose B is random: the accuracy of
always guessing "random" is max(it, 1 - it)), and the train step's `loss` (their sum, what is
optimised).

Examples are built in the input pipeline (data/pipelines/pretraining.py): sentence pairs, truncation and
masking, with every rate from the config. An optional second phase switches to longer
sequences for the last `data.phase2_fraction` of the steps (data/pipelines/phases.py).
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections
import numpy as np

from data.pipelines import pretraining
from data.vocab import wordpiece
from data.errors import DataError
from data.builders.documents import read_documents
from data.pipelines.masking import MaskingConfig
from data.pipelines.phases import PhasedIterator
from data.pipelines.pretraining_instances import INPUT_FORMATS
from data.pipelines.sharding import num_batches
from models.bert import BertConfig
from models.bert_pretraining import BertForPreTraining
from train import flops, vocabulary
from train.config import ConfigError, check_choice, to_dataclass
from train.losses import cross_entropy
from train.run_config import Resolution
from train.tasks.base import Task


def _model_config(config: ml_collections.ConfigDict, vocab_size: int) -> BertConfig:
    model_section = config.model.copy_and_resolve_references()
    with model_section.unlocked():
        del model_section["name"]
    return to_dataclass(BertConfig, model_section, "model", vocab_size=vocab_size)


def _vocabulary(config: ml_collections.ConfigDict, saved, documents_fn):
    """config.data.vocab_file, or one trained on `documents_fn()` (the corpora's training
    documents; cached); at a resumed run's start the one saved in its workdir
    (train/vocabulary.py). `documents_fn=None` (a plan): None for one not trained yet."""
    data = config.data
    if data.vocab_file:
        requested = wordpiece.load_tokenizer(data.vocab_file, lowercase=data.lowercase)
        return vocabulary.choose(saved, lambda: requested, kind="wordpiece",
                                 requested=requested,
                                 where=f"config.data.vocab_file={data.vocab_file!r}")
    key = dict(datasets=tuple(data.names), split=data.train_split, vocab_size=data.vocab_size,
               lowercase=data.lowercase)
    if documents_fn is None:
        return vocabulary.choose(saved, lambda: wordpiece.cached(**key), kind="wordpiece")
    return vocabulary.choose(
        saved, lambda: wordpiece.vocab_for_documents(documents_fn, **key), kind="wordpiece")


class BertPretrainingTask(Task):
    """`BertForPreTraining` on documents from one or more corpora."""

    def __init__(self, config: ml_collections.ConfigDict, saved_vocabulary=None):
        check_choice(config, "model.name", ("bert",))
        check_choice(config, "data.source", ("local",))
        check_choice(config, "data.input_format", INPUT_FORMATS)
        self.config = config
        self._document_cache: dict[str, list] = {}
        data = config.data
        if data.dupe_factor < 0:
            raise ConfigError(f"config.data.dupe_factor={data.dupe_factor} must be >= 0 (0: "
                              "dynamic pairs and masks; N: N static copies)")
        if config.model.nsp and data.input_format != "segment_pair":
            raise ConfigError(f"config.model.nsp=True needs config.data.input_format="
                              f"'segment_pair' (got {data.input_format!r}, which has no pairs)")
        if not 0.0 <= data.phase2_fraction < 1.0:
            raise ConfigError(f"config.data.phase2_fraction={data.phase2_fraction} must be in "
                              "[0, 1)")
        if not data.vocab_file:
            self.vocabulary_settings = ("data.vocab_size", "data.lowercase")
        self.tokenizer = _vocabulary(config, saved_vocabulary,
                                     lambda: self._documents(data.train_split))
        self.model_config = _model_config(config, self.tokenizer.vocab_size)
        for key in ("max_seq_length",) + (("phase2_max_seq_length",) if self.phase2_steps else ()):
            try:
                self.model_config.check_length(data[key])
            except ValueError as error:
                raise ConfigError(f"config.data.{key}={data[key]}: {error} "
                                  "(config.model.max_position_embeddings)") from error
        self.masking = self._masking(data.max_predictions)  # checks the rates now
        self.model = BertForPreTraining(self.model_config)
        self.d_model = self.model_config.hidden_size

    @staticmethod
    def datasets(config) -> tuple[str, ...]:
        return tuple(config.data.names)

    @property
    def phase2_steps(self) -> int:
        return int(round(self.config.train.num_steps * self.config.data.phase2_fraction))

    @classmethod
    def plan(cls, config, saved_vocabulary=None) -> Resolution:
        """The model with the vocabulary's size when it needs no training (a vocab_file, a
        saved or cached one); else the size is pending."""
        data = config.data
        tokenizer = _vocabulary(config, saved_vocabulary, None)
        if tokenizer is not None:
            return Resolution(_model_config(config, tokenizer.vocab_size))
        return Resolution(_model_config(config, data.vocab_size), pending={
            "model.vocab_size": f"the size of the WordPiece vocabulary trained on "
                                f"{'+'.join(data.names)} {data.train_split} when the run starts, "
                                f"config.data.vocab_size={data.vocab_size} asked for (the texts "
                                "may give fewer or more: data/vocab/wordpiece.py); not trained yet"})

    def _masking(self, max_predictions: int) -> MaskingConfig:
        data = self.config.data
        try:
            return pretraining.masking_config(
                self.tokenizer, select_prob=data.select_prob, mask_prob=data.mask_prob,
                random_prob=data.random_prob, keep_prob=data.keep_prob,
                max_predictions=max_predictions, whole_word=data.whole_word)
        except DataError as error:  # its own checks, named by config section here
            raise ConfigError(f"config.data masking: {error}") from error

    # ---- model -----------------------------------------------------------------------------
    def dummy_inputs(self, batch_size: int) -> dict[str, np.ndarray]:
        length = self.config.data.max_seq_length
        return {"input_ids": np.ones((batch_size, length), np.int32),
                "masked_positions": np.zeros((batch_size, self.config.data.max_predictions),
                                             np.int32)}

    def init_variables(self, rng, inputs):
        return self.model.init({"params": rng}, inputs["input_ids"],
                               masked_positions=inputs["masked_positions"], train=False)

    def flops_per_example(self) -> float:
        """Phase-1 FLOPs (the longer phase 2, when configured, costs more: flops_per_example_at)."""
        return flops.bert_train_flops_per_example(
            self.model_config, self.config.data.max_seq_length, self.config.data.max_predictions)

    def flops_per_example_at(self, step: int) -> float:
        """FLOPs of an example of the phase that train step `step` (0-based) belongs to."""
        data = self.config.data
        if not self.phase2_steps or step < self.config.train.num_steps - self.phase2_steps:
            return self.flops_per_example()
        return flops.bert_train_flops_per_example(
            self.model_config, data.phase2_max_seq_length, data.phase2_max_predictions)

    def _rows(self, batch):
        """1 for each real row: eval batches mark their padding rows with mask 0; every
        training row is real."""
        if "mask" in batch:
            return batch["mask"].astype(jnp.float32)
        return jnp.ones(batch["input_ids"].shape[:1], jnp.float32)

    def _sums(self, params, batch, *, train: bool, rng=None):
        """({'mlm': CE summed over predicted positions, 'nsp': CE summed over rows}, metrics)."""
        outputs = self.model.apply(
            {"params": params}, batch["input_ids"], batch["segment_ids"], batch["input_mask"],
            masked_positions=batch["masked_positions"], train=train,
            rngs=None if rng is None else {"dropout": rng})
        rows = self._rows(batch)
        weights = batch["masked_weights"] * rows[:, None]
        mlm = cross_entropy(outputs["mlm_logits"], batch["masked_ids"]) * weights
        mlm_correct = (jnp.argmax(outputs["mlm_logits"], -1) == batch["masked_ids"]) * weights
        mlm_count = weights.sum()
        terms = {"mlm": mlm.sum()}
        metrics = {"mlm_loss": (mlm.sum(), mlm_count),
                   "mlm_accuracy": (mlm_correct.sum(), mlm_count)}
        if "nsp_logits" in outputs:
            labels = batch["next_sentence_label"]
            nsp = cross_entropy(outputs["nsp_logits"], labels) * rows
            correct = (jnp.argmax(outputs["nsp_logits"], -1) == labels) * rows
            count = rows.sum()
            terms["nsp"] = nsp.sum()
            metrics.update(nsp_loss=(nsp.sum(), count), nsp_accuracy=(correct.sum(), count),
                           # the label balance, to read nsp_accuracy against (1 = B is random)
                           nsp_random_fraction=((labels * rows).sum(), count))
        return terms, metrics

    # ---- pure functions the trainer jits ---------------------------------------------------
    def loss_normalizers(self, batch):
        """BERT's loss is the MLM cross-entropy averaged over the predicted positions plus the
        NSP cross-entropy averaged over the sequences (`get_masked_lm_output` /
        `get_next_sentence_output`), each mean over the whole batch."""
        rows = self._rows(batch)
        normalizers = {"mlm": (batch["masked_weights"] * rows[:, None]).sum()}
        if self.model_config.nsp:
            normalizers["nsp"] = rows.sum()
        return normalizers

    def loss_fn(self, params, batch, rng):
        return self._sums(params, batch, train=True, rng=rng)

    def eval_fn(self, params, batch):
        return self._sums(params, batch, train=False)[1]

    # ---- data --------------------------------------------------------------------------------
    def _documents(self, split: str) -> list:
        """The Documents of `split` of every corpus in data.names, one list (cached)."""
        if split not in self._document_cache:
            self._document_cache[split] = [doc for name in self.config.data.names
                                           for doc in read_documents(name, split)]
        return self._document_cache[split]

    def _batches(self, documents, *, max_seq_length: int, max_predictions: int, train: bool,
                 batch_size: int, seed: int, process_index: int, process_count: int):
        data = self.config.data
        return pretraining.pretraining_batches(
            documents, self.tokenizer, batch_size=batch_size, max_seq_length=max_seq_length,
            input_format=data.input_format, masking=self._masking(max_predictions),
            short_seq_prob=data.short_seq_prob, dynamic=data.dupe_factor == 0,
            dupe_factor=max(1, data.dupe_factor), seed=seed, train=train, process_index=process_index, process_count=process_count)

    def train_iterator(self, *, batch_size: int, seed: int, process_index: int, process_count: int):
        data = self.config.data
        documents = self._documents(data.train_split)
        common = dict(train=True, batch_size=batch_size, seed=seed, process_index=process_index,
                      process_count=process_count)
        first = self._batches(documents, max_seq_length=data.max_seq_length,
                              max_predictions=data.max_predictions, **common)
        if not self.phase2_steps:
            return first
        return PhasedIterator(
            first, lambda: self._batches(documents, max_seq_length=data.phase2_max_seq_length,
                                         max_predictions=data.phase2_max_predictions, **common),
            switch_after=self.config.train.num_steps - self.phase2_steps)

    def eval_batches(self, *, batch_size: int, process_index: int, process_count: int):
        data = self.config.data
        documents = self._documents(data.eval_split)
        iterator = self._batches(documents, max_seq_length=data.max_seq_length,
                                 max_predictions=data.max_predictions, train=False,
                                 batch_size=batch_size, seed=0, process_index=process_index,
                                 process_count=process_count)
        count = pretraining.num_examples(
            documents, self.tokenizer, max_seq_length=data.max_seq_length, seed=0,
            input_format=data.input_format, short_seq_prob=data.short_seq_prob)
        return iterator, num_batches(count, batch_size=batch_size,
                                                 process_count=process_count)
