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
sequences (and its own batch size) for the last `data.phase2_fraction` of the steps
(data/pipelines/phases.py).

Two sources of documents (`data.source`):
  local  the fetched corpora of data.names (Brown, Austen, SOTU), tokenized whole in memory;
  tfds   English Wikipedia from the TFDS catalog (data.names = one 'wikipedia/<dump>.en'),
         streamed article by article (data/pipelines/pretraining_stream.py: passages and
         sentences split as each article is read, examples shuffled in windows of
         data.shuffle_window), its WordPiece vocabulary trained on data.vocab_sample_documents
         articles spread over the training split (or data.vocab_file); evaluated on the
         held-out articles of data.eval_split, tokenized in memory like the local corpora.
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections
import numpy as np

from data.pipelines import pretraining, pretraining_stream
from data.vocab import wordpiece
from data.errors import DataError
from data.builders import sources
from data.builders.documents import read_documents
from data.corpora import wikipedia
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


def _vocabulary_split(data) -> str:
    """What a trained vocabulary's cache file is named after: the training split, or for a
    TFDS stream the sample of it that trains the vocabulary."""
    if data.source == "tfds":
        return f"{data.train_split}-sample{data.vocab_sample_documents}"
    return data.train_split


def _vocabulary(config: ml_collections.ConfigDict, saved, documents_fn):
    """config.data.vocab_file, or one trained on `documents_fn()` (the corpora's training
    documents, or a TFDS stream's sample of them; cached); at a resumed run's start the one
    saved in its workdir (train/vocabulary.py). `documents_fn=None` (a plan): None for one not
    trained yet."""
    data = config.data
    if data.vocab_file:
        requested = wordpiece.load_tokenizer(data.vocab_file, lowercase=data.lowercase)
        return vocabulary.choose(saved, lambda: requested, kind="wordpiece",
                                 requested=requested,
                                 where=f"config.data.vocab_file={data.vocab_file!r}")
    key = dict(datasets=tuple(data.names), split=_vocabulary_split(data),
               vocab_size=data.vocab_size, lowercase=data.lowercase)
    if documents_fn is None:
        return vocabulary.choose(saved, lambda: wordpiece.cached(**key), kind="wordpiece")
    return vocabulary.choose(
        saved, lambda: wordpiece.vocab_for_documents(documents_fn, **key), kind="wordpiece")


def phase2_steps(config) -> int:
    """The steps of phase 2: the last data.phase2_fraction of train.num_steps, rounded."""
    return int(round(config.train.num_steps * config.data.phase2_fraction))


def _check_source(data) -> None:
    """The keys of the TFDS stream are set for data.source='tfds' and off for 'local'."""
    stream = dict(shuffle_window=data.shuffle_window,
                  vocab_sample_documents=data.vocab_sample_documents)
    if data.source == "local":
        on = [f"config.data.{k}={v}" for k, v in stream.items() if v]
        if on:
            raise ConfigError(f"{', '.join(on)} apply to data.source='tfds' (a stream of "
                              "Wikipedia articles); the local corpora are read whole: set "
                              "them to 0")
        return
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
    if not data.vocab_file and data.vocab_sample_documents < 1:
        raise ConfigError(f"config.data.vocab_sample_documents={data.vocab_sample_documents}: "
                          "name the articles the WordPiece vocabulary is trained on (e.g. "
                          "100000), or give config.data.vocab_file")
    if data.dupe_factor:
        raise ConfigError(f"config.data.dupe_factor={data.dupe_factor}: a stream makes new "
                          "pairs and masks every epoch (dynamic); set it to 0")


class BertPretrainingTask(Task):
    """`BertForPreTraining` on documents from one or more corpora."""

    def __init__(self, config: ml_collections.ConfigDict, saved_vocabulary=None):
        check_choice(config, "model.name", ("bert",))
        check_choice(config, "data.source", sources.SOURCE_KINDS)
        check_choice(config, "data.input_format", INPUT_FORMATS)
        self.config = config
        self._document_cache: dict[str, list] = {}
        data = config.data
        _check_source(data)
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
        self.tokenizer = _vocabulary(config, saved_vocabulary, self._vocabulary_documents)
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
        return tuple(config.data.names) if config.data.source == "local" else ()

    @property
    def phase2_steps(self) -> int:
        return phase2_steps(self.config)

    def global_batch_at(self, step: int) -> int:
        """Sequences in the global batch of train step `step`: data.phase2_batch_size in phase 2
        (BERT keeps ~128k tokens a batch: 1024 x 128, then 256 x 512)."""
        data = self.config.data
        in_phase2 = self.phase2_steps and step >= self.config.train.num_steps - self.phase2_steps
        return data.phase2_batch_size if in_phase2 else data.batch_size

    @staticmethod
    def train_batch_keys(config) -> tuple[str, ...]:
        return ("batch_size",) + (("phase2_batch_size",) if config.data.phase2_fraction else ())

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
                                f"{'+'.join(data.names)} {_vocabulary_split(data)} when the run "
                                "starts, "
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
    def _source(self, split: str):
        """The TFDS data source of `split` of the Wikipedia dump (data.source='tfds')."""
        return sources.get_data_source(self.config.data.names[0], split, source="tfds")

    def _documents(self, split: str) -> list:
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

    def _vocabulary_documents(self) -> list:
        """The documents a WordPiece vocabulary is trained on: the training documents, or for
        TFDS Wikipedia data.vocab_sample_documents articles spread over the training split."""
        data = self.config.data
        if data.source == "tfds":
            return pretraining_stream.sample_documents(
                self._source(data.train_split), data.vocab_sample_documents,
                wikipedia.article_document)
        return self._documents(data.train_split)

    def _batches(self, documents, *, max_seq_length: int, max_predictions: int, train: bool,
                 batch_size: int, seed: int, process_index: int, process_count: int):
        data = self.config.data
        return pretraining.pretraining_batches(
            documents, self.tokenizer, batch_size=batch_size, max_seq_length=max_seq_length,
            input_format=data.input_format, masking=self._masking(max_predictions),
            short_seq_prob=data.short_seq_prob, dynamic=data.dupe_factor == 0,
            dupe_factor=max(1, data.dupe_factor), seed=seed, train=train, process_index=process_index, process_count=process_count)

    def _stream(self, *, max_seq_length: int, max_predictions: int, batch_size: int, seed: int,
                process_index: int, process_count: int):
        data = self.config.data
        return pretraining_stream.stream_batches(
            self._source(data.train_split), self.tokenizer,
            to_document=wikipedia.article_document, batch_size=batch_size,
            max_seq_length=max_seq_length, masking=self._masking(max_predictions), seed=seed,
            input_format=data.input_format, short_seq_prob=data.short_seq_prob,
            shuffle_window=data.shuffle_window, process_index=process_index,
            process_count=process_count)

    def train_iterator(self, *, batch_size: int, seed: int, process_index: int, process_count: int):
        """Phase 1's batches of `batch_size` (this process's share of data.batch_size), then
        phase 2's of this process's share of data.phase2_batch_size."""
        data = self.config.data
        common = dict(seed=seed, process_index=process_index, process_count=process_count)
        if data.source == "tfds":
            def make(max_seq_length, max_predictions, size):
                return self._stream(max_seq_length=max_seq_length,
                                    max_predictions=max_predictions, batch_size=size, **common)
        else:
            documents = self._documents(data.train_split)

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
