"""The inputs of masked-LM training on document corpora, shared by BERT pretraining
(train/tasks/bert_pretrain.py) and general-purpose distillation (train/tasks/distill_pretrain.py).

Examples are built in the input pipeline (data/pipelines/pretraining.py): sentence pairs or
packed sentences, truncation and masking, with every rate from `config.data`, dynamic
(`dupe_factor=0`, new pairs and masks every epoch) or static (N copies). An optional second phase
switches to longer sequences, with its own global batch (`data.phase2_batch_size`), for the last
`data.phase2_fraction` of the steps (data/pipelines/phases.py).

Two sources of documents (`data.source`):
  local  the fetched corpora of data.names (Brown, Austen, SOTU), tokenized whole in memory;
  tfds   English Wikipedia from the TFDS catalog (data.names = one 'wikipedia/<dump>.en'),
         streamed article by article (data/pipelines/pretraining_stream.py: passages and
         sentences split as each article is read, examples shuffled in windows of
         data.shuffle_window, made in data.worker_count processes where it is above 0);
         evaluated on the held-out articles of data.eval_split, tokenized in memory like the
         local corpora.
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections
import numpy as np

from data.builders import sources
from data.builders.documents import read_documents
from data.corpora import wikipedia
from data.errors import DataError
from data.pipelines import pretraining, pretraining_stream
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


def phase2_steps(config) -> int:
    """The steps of phase 2: the last data.phase2_fraction of train.num_steps, rounded."""
    return int(round(config.train.num_steps * config.data.phase2_fraction))


def _check_predictions(config) -> None:
    """ConfigError where a phase's max_predictions would cap the masking rate: the tokens
    select_prob chooses of a full sequence (its length less [CLS] and [SEP]) must fit, as
    BERT's 20 at length 128 and 80 at 512 hold 15% (a capped rate is another ablation)."""
    data = config.data
    phases = [("max_seq_length", "max_predictions")]
    if phase2_steps(config):
        phases.append(("phase2_max_seq_length", "phase2_max_predictions"))
    for length_key, key in phases:
        tokens = data[length_key] - 2
        wanted = int(round(tokens * data.select_prob))
        if wanted > data[key]:
            raise ConfigError(
                f"config.data.{key}={data[key]} is fewer than the {wanted} predictions "
                f"config.data.select_prob={data.select_prob} chooses of a full sequence "
                f"(config.data.{length_key}={data[length_key]}: {tokens} tokens), which would "
                f"cap the masking rate at {data[key] / tokens:.1%}; set --config.data.{key}="
                f"{wanted} or more")


def train_batch_keys(config) -> tuple[str, ...]:
    """The config.data keys of the global training batches: phase 2's too when there is one."""
    return ("batch_size",) + (("phase2_batch_size",) if config.data.phase2_fraction else ())


def _check_source(data) -> None:
    """The stream's keys are set for data.source='tfds' and off for 'local'."""
    if data.source == "local":
        for key in ("shuffle_window", "worker_count"):
            if data[key]:
                raise ConfigError(f"config.data.{key}={data[key]} applies to data.source='tfds' "
                                  "(a stream of Wikipedia articles); the local corpora are read "
                                  "whole, in this process: set it to 0")
        return
    if isinstance(data.worker_count, bool) or not isinstance(data.worker_count, int) \
            or data.worker_count < 0:
        raise ConfigError(f"config.data.worker_count={data.worker_count!r} must be an integer "
                          ">= 0 (0: the stream is made in this process)")
    names = tuple(data.names)
    if len(names) != 1 or not names[0].startswith("wikipedia/"):
        raise ConfigError(f"config.data.names={names}: data.source='tfds' streams one TFDS "
                          "Wikipedia dump, e.g. ('wikipedia/20230601.en',) "
                          "(data/corpora/wikipedia.py reads its articles)")
    if data.input_format not in pretraining_stream.STREAM_FORMATS:
        raise ConfigError(f"config.data.input_format={data.input_format!r} is not streamed (it "
                          "packs sentences across documents); data.source='tfds' takes "
                          f"{list(pretraining_stream.STREAM_FORMATS)}")
    if data.shuffle_window < 1:
        raise ConfigError(f"config.data.shuffle_window={data.shuffle_window} must be >= 1 "
                          "(examples shuffled together in the stream)")
    if data.dupe_factor:
        raise ConfigError(f"config.data.dupe_factor={data.dupe_factor}: a stream makes new "
                          "pairs and masks every epoch (dynamic); set it to 0")


class PretrainingInputs:
    """The documents of `config.data` (`documents`, `sample_documents`, e.g. to train a
    vocabulary on), and once `use_tokenizer` has been given the vocabulary, the train and eval
    batches."""

    def __init__(self, config: ml_collections.ConfigDict):
        check_choice(config, "data.source", sources.SOURCE_KINDS)
        check_choice(config, "data.input_format", INPUT_FORMATS)
        data = config.data
        _check_source(data)
        if data.dupe_factor < 0:
            raise ConfigError(f"config.data.dupe_factor={data.dupe_factor} must be >= 0 (0: "
                              "dynamic pairs and masks; N: N static copies)")
        if data.input_format != "segment_pair" and data.short_seq_prob:
            raise ConfigError(f"config.data.short_seq_prob={data.short_seq_prob} with "
                              f"input_format={data.input_format!r}: only segment_pair draws short "
                              "pairs (packed rows are filled to the length); set it to 0")
        if not 0.0 <= data.phase2_fraction < 1.0:
            raise ConfigError(f"config.data.phase2_fraction={data.phase2_fraction} must be in "
                              "[0, 1)")
        _check_predictions(config)
        self.config = config
        self.tokenizer = None
        self._document_cache: dict[str, list] = {}

    @staticmethod
    def datasets(config) -> tuple[str, ...]:
        """The datasets `python -m data.fetch` fetches: the local corpora (TFDS builds its own)."""
        return tuple(config.data.names) if config.data.source == "local" else ()

    def use_tokenizer(self, tokenizer) -> None:
        """The vocabulary the batches are made with; checks the masking rates against it."""
        self.tokenizer = tokenizer
        self.masking_config(self.config.data.max_predictions)

    @property
    def phase2_steps(self) -> int:
        return phase2_steps(self.config)

    def in_phase2(self, step: int) -> bool:
        """Whether train step `step` (0-based) belongs to phase 2."""
        return bool(self.phase2_steps) and (
            step >= self.config.train.num_steps - self.phase2_steps)

    def global_batch_at(self, step: int) -> int:
        """Sequences in the global batch of train step `step`: data.phase2_batch_size in phase 2
        (BERT keeps ~128k tokens a batch: 1024 x 128, then 256 x 512)."""
        data = self.config.data
        return data.phase2_batch_size if self.in_phase2(step) else data.batch_size

    def check_lengths(self, model_config) -> None:
        """ConfigError when a phase's sequence length does not fit the model's positions."""
        data = self.config.data
        for key in ("max_seq_length",) + (("phase2_max_seq_length",) if self.phase2_steps else ()):
            if data[key] < 3:  # (a pair's format asks for more, when its instances are made)
                raise ConfigError(f"config.data.{key}={data[key]} must be >= 3: [CLS], a token "
                                  "and [SEP]")
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

    # ---- documents ---------------------------------------------------------------------------
    def _source(self, split: str):
        """The TFDS data source of `split` of the Wikipedia dump (data.source='tfds')."""
        return sources.get_data_source(self.config.data.names[0], split, source="tfds")

    def documents(self, split: str) -> list:
        """The Documents of `split` of every corpus in data.names, one list (cached); for TFDS
        Wikipedia every article of the split, split into passages and sentences."""
        if split not in self._document_cache:
            if self.config.data.source == "tfds":
                source = self._source(split)
                self._document_cache[split] = pretraining_stream.sample_documents(
                    source, len(source), wikipedia.article_document)
            else:
                self._document_cache[split] = [doc for name in self.config.data.names
                                               for doc in read_documents(name, split)]
        return self._document_cache[split]

    def sample_documents(self, count: int) -> list:
        """`count` articles spread over the training split of the TFDS Wikipedia stream (e.g. to
        train a vocabulary on without reading them all)."""
        data = self.config.data
        if data.source != "tfds":
            raise ValueError(f"sample_documents samples a TFDS stream; data.source="
                             f"{data.source!r} is read whole (documents)")
        return pretraining_stream.sample_documents(
            self._source(data.train_split), count, wikipedia.article_document)

    # ---- batches -----------------------------------------------------------------------------
    def _batches(self, documents, *, max_seq_length: int, max_predictions: int, train: bool,
                 batch_size: int, seed: int, process_index: int, process_count: int):
        data = self.config.data
        return pretraining.pretraining_batches(
            documents, self.tokenizer, batch_size=batch_size, max_seq_length=max_seq_length,
            input_format=data.input_format, masking=self.masking_config(max_predictions),
            short_seq_prob=data.short_seq_prob, dynamic=data.dupe_factor == 0,
            dupe_factor=max(1, data.dupe_factor), seed=seed, train=train,
            process_index=process_index, process_count=process_count)

    def _stream(self, *, max_seq_length: int, max_predictions: int, batch_size: int, seed: int,
                process_index: int, process_count: int):
        data = self.config.data
        return pretraining_stream.stream_batches(
            self._source(data.train_split), self.tokenizer,
            to_document=wikipedia.article_document, batch_size=batch_size,
            max_seq_length=max_seq_length, masking=self.masking_config(max_predictions),
            seed=seed, input_format=data.input_format, short_seq_prob=data.short_seq_prob,
            shuffle_window=data.shuffle_window, process_index=process_index,
            process_count=process_count, worker_count=data.worker_count)

    def train_iterator(self, *, batch_size: int, seed: int, process_index: int,
                       process_count: int):
        """Phase 1's batches of `batch_size` (this process's share of data.batch_size), then
        phase 2's of this process's share of data.phase2_batch_size."""
        data = self.config.data
        common = dict(seed=seed, process_index=process_index, process_count=process_count)
        if data.source == "tfds":
            def make(max_seq_length, max_predictions, size):
                return self._stream(max_seq_length=max_seq_length,
                                    max_predictions=max_predictions, batch_size=size, **common)
        else:
            documents = self.documents(data.train_split)

            def make(max_seq_length, max_predictions, size):
                return self._batches(documents, max_seq_length=max_seq_length,
                                     max_predictions=max_predictions, train=True,
                                     batch_size=size, **common)
        first = make(data.max_seq_length, data.max_predictions, batch_size)
        if not self.phase2_steps:
            return first
        return PhasedIterator(
            first, lambda: make(data.phase2_max_seq_length, data.phase2_max_predictions,
                                data.phase2_batch_size // process_count),
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


class MaskedLMData:
    """The data side of a Task (train/tasks/base.py) whose batches come from `self.inputs`, a
    PretrainingInputs: listed before Task in the bases, so phase 2's batch size reaches the
    trainer (global_batch_at, train_batch_keys) for BERT pretraining and distillation alike."""

    INPUT_KEYS = ("names", "input_format", "max_seq_length", "max_predictions", "select_prob",
                  "mask_prob", "random_prob", "keep_prob", "whole_word", "short_seq_prob",
                  "dupe_factor", "phase2_fraction", "phase2_max_seq_length",
                  "phase2_max_predictions", "phase2_batch_size", "shuffle_window",
                  "worker_count")  # the config.data keys PretrainingInputs reads

    config: ml_collections.ConfigDict
    inputs: PretrainingInputs

    def dummy_inputs(self, batch_size: int) -> dict[str, np.ndarray]:
        """Inputs of phase 1's shapes, to initialise the model with."""
        length = self.config.data.max_seq_length
        return {"input_ids": np.ones((batch_size, length), np.int32),
                "masked_positions": np.zeros((batch_size, self.config.data.max_predictions),
                                             np.int32)}

    @staticmethod
    def datasets(config) -> tuple[str, ...]:
        return PretrainingInputs.datasets(config)

    @property
    def phase2_steps(self) -> int:
        return self.inputs.phase2_steps

    def global_batch_at(self, step: int) -> int:
        return self.inputs.global_batch_at(step)

    @staticmethod
    def train_batch_keys(config) -> tuple[str, ...]:
        return train_batch_keys(config)

    def train_iterator(self, *, batch_size: int, seed: int, process_index: int,
                       process_count: int):
        return self.inputs.train_iterator(batch_size=batch_size, seed=seed,
                                          process_index=process_index,
                                          process_count=process_count)

    def check_eval_split(self) -> None:
        """The eval documents read (and cached) before training: a misspelt split costs no
        steps; a TFDS stream's split is opened only."""
        data = self.config.data
        if data.source == "tfds":
            self.inputs._source(data.eval_split)
        else:
            self.inputs.documents(data.eval_split)

    def eval_batches(self, *, batch_size: int, process_index: int, process_count: int):
        return self.inputs.eval_batches(batch_size=batch_size, process_index=process_index,
                                        process_count=process_count)
