"""The inputs of masked-LM training on document corpora, shared by BERT pretraining
(train/tasks/bert_pretrain.py) and general-purpose distillation (train/tasks/distill_pretrain.py).

Examples are built in the input pipeline (data/pipelines/pretraining.py): sentence pairs or
packed sentences, truncation and masking, with every rate from `config.data`, dynamic
(`dupe_factor=0`, new pairs and masks every epoch) or static (N copies). An optional second phase
switches to longer sequences for the last `data.phase2_fraction` of the steps
(data/pipelines/phases.py).
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections

from data.builders.documents import read_documents
from data.errors import DataError
from data.pipelines import pretraining
from data.pipelines.masking import MaskingConfig
from data.pipelines.phases import PhasedIterator
from data.pipelines.pretraining_instances import INPUT_FORMATS
from data.pipelines.sharding import num_batches
from train.config import ConfigError, check_choice


def real_rows(batch):
    """1 for each real row of a batch: eval batches mark their padding rows with mask 0; every
    training row is real."""
    if "mask" in batch:
        return batch["mask"].astype(jnp.float32)
    return jnp.ones(batch["input_ids"].shape[:1], jnp.float32)


class PretrainingInputs:
    """The documents of `config.data` (`documents`, e.g. to train a vocabulary on), and once
    `use_tokenizer` has been given the vocabulary, the train and eval batches."""

    def __init__(self, config: ml_collections.ConfigDict):
        check_choice(config, "data.source", ("local",))
        check_choice(config, "data.input_format", INPUT_FORMATS)
        data = config.data
        if data.dupe_factor < 0:
            raise ConfigError(f"config.data.dupe_factor={data.dupe_factor} must be >= 0 (0: "
                              "dynamic pairs and masks; N: N static copies)")
        if not 0.0 <= data.phase2_fraction < 1.0:
            raise ConfigError(f"config.data.phase2_fraction={data.phase2_fraction} must be in "
                              "[0, 1)")
        self.config = config
        self.tokenizer = None
        self._document_cache: dict[str, list] = {}

    def use_tokenizer(self, tokenizer) -> None:
        """The vocabulary the batches are made with; checks the masking rates against it."""
        self.tokenizer = tokenizer
        self.masking_config(self.config.data.max_predictions)

    @property
    def phase2_steps(self) -> int:
        return int(round(self.config.train.num_steps * self.config.data.phase2_fraction))

    def check_lengths(self, model_config) -> None:
        """ConfigError when a phase's sequence length does not fit the model's positions."""
        data = self.config.data
        for key in ("max_seq_length",) + (("phase2_max_seq_length",) if self.phase2_steps else ()):
            try:
                model_config.check_length(data[key])
            except ValueError as error:
                raise ConfigError(f"config.data.{key}={data[key]}: {error} "
                                  "(config.model.max_position_embeddings)") from error

    def masking_config(self, max_predictions: int) -> MaskingConfig:
        if self.tokenizer is None:
            raise RuntimeError("PretrainingInputs.use_tokenizer was not called")
        data = self.config.data
        try:
            return pretraining.masking_config(
                self.tokenizer, select_prob=data.select_prob, mask_prob=data.mask_prob,
                random_prob=data.random_prob, keep_prob=data.keep_prob,
                max_predictions=max_predictions, whole_word=data.whole_word)
        except DataError as error:  # its own checks, named by config section here
            raise ConfigError(f"config.data masking: {error}") from error

    def documents(self, split: str) -> list:
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
            input_format=data.input_format, masking=self.masking_config(max_predictions),
            short_seq_prob=data.short_seq_prob, dynamic=data.dupe_factor == 0,
            dupe_factor=max(1, data.dupe_factor), seed=seed, train=train,
            process_index=process_index, process_count=process_count)

    def train_iterator(self, *, batch_size: int, seed: int, process_index: int,
                       process_count: int):
        data = self.config.data
        documents = self.documents(data.train_split)
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
        documents = self.documents(data.eval_split)
        iterator = self._batches(documents, max_seq_length=data.max_seq_length,
                                 max_predictions=data.max_predictions, train=False,
                                 batch_size=batch_size, seed=0, process_index=process_index,
                                 process_count=process_count)
        count = pretraining.num_examples(
            documents, self.tokenizer, max_seq_length=data.max_seq_length, seed=0,
            input_format=data.input_format, short_seq_prob=data.short_seq_prob)
        return iterator, num_batches(count, batch_size=batch_size, process_count=process_count)
