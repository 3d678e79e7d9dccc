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
(data/pipelines/phases.py). The batches come from train/tasks/pretraining_inputs.py, which
general-purpose distillation shares: the local corpora of data.names read whole
(data.source='local'), or TFDS English Wikipedia streamed article by article ('tfds'), whose
WordPiece vocabulary is trained on data.vocab_sample_documents articles spread over the
training split (or data.vocab_file).
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections

from data.vocab import wordpiece
from models.bert import BertConfig
from models.bert_pretraining import BertForPreTraining
from train import flops, vocabulary
from train.config import ConfigError, check_choice, to_dataclass
from train.losses import cross_entropy
from train.run_config import Resolution
from train.tasks.base import Task
from train.tasks.pretraining_inputs import MaskedLMData, PretrainingInputs, real_rows


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
               vocab_size=data.vocab_size, lowercase=data.lowercase,
               max_characters=data.get("vocab_max_characters", 0))  # absent in older runs
    if documents_fn is None:
        return vocabulary.choose(saved, lambda: wordpiece.cached(**key), kind="wordpiece")
    return vocabulary.choose(
        saved, lambda: wordpiece.vocab_for_documents(documents_fn, **key), kind="wordpiece")


def _check_vocabulary_sample(data) -> None:
    """data.vocab_sample_documents names the articles a TFDS stream's vocabulary is trained on;
    the local corpora train it on all their training documents."""
    if data.source == "local":
        if data.vocab_sample_documents:
            raise ConfigError(f"config.data.vocab_sample_documents={data.vocab_sample_documents} "
                              "applies to data.source='tfds' (a stream of Wikipedia articles); "
                              "the local corpora are read whole: set it to 0")
    elif not data.vocab_file and data.vocab_sample_documents < 1:
        raise ConfigError(f"config.data.vocab_sample_documents={data.vocab_sample_documents}: "
                          "name the articles the WordPiece vocabulary is trained on (e.g. "
                          "100000), or give config.data.vocab_file")


class BertPretrainingTask(MaskedLMData, Task):
    """`BertForPreTraining` on documents from one or more corpora."""

    DATA_KEYS = Task.DATA_KEYS + MaskedLMData.INPUT_KEYS + (
        "vocab_file", "vocab_size", "lowercase", "vocab_sample_documents", "vocab_max_characters")

    def __init__(self, config: ml_collections.ConfigDict, saved_vocabulary=None):
        check_choice(config, "model.name", ("bert",))
        self.config = config
        self.inputs = PretrainingInputs(config)
        data = config.data
        _check_vocabulary_sample(data)
        if config.model.nsp and data.input_format != "segment_pair":
            raise ConfigError(f"config.model.nsp=True needs config.data.input_format="
                              f"'segment_pair' (got {data.input_format!r}, which has no pairs)")
        if not data.vocab_file:  # (the alphabet's limit only where set: older runs lack it)
            self.vocabulary_settings = ("data.vocab_size", "data.lowercase") + (
                ("data.vocab_max_characters",) if data.get("vocab_max_characters", 0) else ())
        self.tokenizer = _vocabulary(config, saved_vocabulary, self._vocabulary_documents)
        self.inputs.use_tokenizer(self.tokenizer)
        self.model_config = _model_config(config, self.tokenizer.vocab_size)
        self.inputs.check_lengths(self.model_config)
        self.model = BertForPreTraining(self.model_config)
        self.d_model = self.model_config.hidden_size

    def _vocabulary_documents(self) -> list:
        """The documents a WordPiece vocabulary is trained on: the training documents, or for
        TFDS Wikipedia data.vocab_sample_documents articles spread over the training split."""
        data = self.config.data
        if data.source == "tfds":
            return self.inputs.sample_documents(data.vocab_sample_documents)
        return self.inputs.documents(data.train_split)

    def resolution(self) -> Resolution:
        unused = vocabulary.unused_size(self.config.data, self.tokenizer)
        return Resolution(self.model_config, notes=(unused,) if unused else ())

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

    # ---- model -----------------------------------------------------------------------------
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
        if not self.inputs.in_phase2(step):
            return self.flops_per_example()
        return flops.bert_train_flops_per_example(
            self.model_config, data.phase2_max_seq_length, data.phase2_max_predictions)

    def _sums(self, params, batch, *, train: bool, rng=None):
        """({'mlm': CE summed over predicted positions, 'nsp': CE summed over rows}, metrics)."""
        outputs = self.model.apply(
            {"params": params}, batch["input_ids"], batch["segment_ids"], batch["input_mask"],
            masked_positions=batch["masked_positions"], train=train,
            rngs=None if rng is None else {"dropout": rng})
        rows = real_rows(batch)
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
        rows = real_rows(batch)
        normalizers = {"mlm": (batch["masked_weights"] * rows[:, None]).sum()}
        if self.model_config.nsp:
            normalizers["nsp"] = rows.sum()
        return normalizers

    def loss_fn(self, params, batch, rng):
        return self._sums(params, batch, train=True, rng=rng)

    def eval_fn(self, params, batch):
        return self._sums(params, batch, train=False)[1]
