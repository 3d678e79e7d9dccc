"""BERT fine-tuning (Devlin et al. 2019, Sec. 4) and feature-based use (Sec. 5.3, Table 7).

One task for the five kinds of labelled data (data/pipelines/finetune_datasets.py), each with the head of
models/bert_heads.py that BERT's Fig. 4 draws for it:

  kind             head                             loss (train/losses.py cross_entropy)
  classify         BertForSequenceClassification    CE of the label, mean over sequences
  pair_classify    BertForSequenceClassification    the same; the pair told apart by segment ids
  tag              BertForTokenClassification       CE of each word's tag at its first piece,
                                                    mean over words
  span             BertForQuestionAnswering         (CE(start) + CE(end)) / 2, mean over the
                                                    examples whose answer is inside the input
  multiple_choice  BertForMultipleChoice            CE over the choices, mean over examples

Metrics: `loss` and `accuracy` (tag: `token_accuracy` over the words that fit in
data.max_seq_length, `sentence_accuracy`, every such word right, and `word_accuracy` over all
the words, those cut off counted wrong; span: `exact_match` and `f1` (train/span_metrics.py)
of the best span (models/spans.py, at most task.max_answer_length pieces) against any
reference, counted on word pieces rather than the official script's normalised words). Sums
with counts, as every task here.

Initialisation (`config.init`, train/finetune_init.py): 'scratch', 'minilm' or the workdir of a
pretraining run; the pretrained encoder replaces the random `params['bert']` in
`init_variables`, which the trainer calls to build its state. Its sizes replace config.model's:
the run's config.json records the model that ran (`resolution`, train/run_config.py).

Feature-based mode (`task.features` != 'none'): the encoder runs without dropout and its
outputs are cut from the gradient (stop_gradient), so its parameters get exactly zero
gradients; Adam then leaves them unchanged, and the config must set optimizer.weight_decay = 0
(decoupled weight decay would shrink them). Available for classify, pair_classify and tag.
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections
import numpy as np

from data.pipelines import finetune as ft_data
from data.fetching import pretrained
from data.pipelines import counts
from data.errors import DataError
from data.pipelines.finetune_datasets import get_dataset
from data.pipelines.sharding import num_batches
from models import bert_heads
from models.spans import best_span
from train import flops, vocabulary
from train.config import ConfigError, check_choice
from train.finetune_init import replace_encoder, resolve_init
from train.losses import cross_entropy, mask_padding
from train.run_config import Resolution
from train.span_metrics import exact_match_and_f1
from train.tasks.base import Task

FEATURE_KINDS = ("classify", "pair_classify", "tag")


def _scratch_vocab_key(data: ml_collections.ConfigDict) -> dict:
    """The cache entry (data/vocab/wordpiece.py) of the vocabulary trained on a task's texts."""
    return dict(datasets=f"finetune-{data.name}", split=data.train_split,
                vocab_size=data.vocab_size, lowercase=data.lowercase)


class FinetuneTask(Task):
    """A BERT head on a labelled dataset, from a pretrained (or random) encoder."""

    TASK_KEYS = Task.TASK_KEYS + ("features", "feature_head", "head_hidden", "max_answer_length")
    DATA_KEYS = Task.DATA_KEYS + ("name", "max_seq_length", "max_query_length", "vocab_file",
                                  "vocab_size", "lowercase")

    def __init__(self, config: ml_collections.ConfigDict, saved_vocabulary=None):
        check_choice(config, "model.name", ("bert",))
        check_choice(config, "data.source", ("local", "tfds"))
        self.config = config
        self.dataset = _dataset(config)
        self.kind = self.dataset.kind
        if config.task.max_answer_length < 1:
            raise ConfigError(f"config.task.max_answer_length={config.task.max_answer_length} "
                              "must be >= 1")
        self._check_options()
        self.model_config, self.tokenizer = self._resolve_model(saved_vocabulary)
        try:
            self.model_config.check_length(config.data.max_seq_length)
        except ValueError as error:
            raise ConfigError(f"config.data.max_seq_length: {error}") from error
        self.model = self._head()
        try:
            self.encoder = ft_data.FeatureEncoder(
                self.kind, self.tokenizer, config.data.max_seq_length,
                num_labels=self.dataset.num_labels, num_choices=self.dataset.num_choices,
                max_query_length=config.data.max_query_length)
        except DataError as error:
            raise ConfigError(f"config.data: {error}") from error
        self.d_model = self.model_config.hidden_size
        self._num_train_examples = 0

    def _check_options(self) -> None:
        """The checks of config.task's feature-based mode."""
        config, task = self.config, self.config.task
        check_choice(config, "task.features", bert_heads.FEATURE_MODES)
        check_choice(config, "task.feature_head", bert_heads.TOKEN_FEATURE_HEADS)
        if task.features != "none":
            if self.kind not in FEATURE_KINDS:
                raise ConfigError(f"config.task.features={task.features!r}: the feature-based "
                                  f"mode exists for {list(FEATURE_KINDS)}, not {self.kind!r}")
            if config.optimizer.weight_decay != 0.0:
                raise ConfigError(
                    f"config.task.features={task.features!r} freezes the encoder, but "
                    f"config.optimizer.weight_decay={config.optimizer.weight_decay} would still "
                    "shrink its parameters (decoupled decay ignores gradients); set it to 0")

    def _resolve_model(self, saved_vocabulary):
        """(the model config, the vocabulary) of config.init (train/finetune_init.py)."""
        config, data = self.config, self.config.data
        self.init = resolve_init(config, scratch_vocab=lambda: vocabulary.choose(
            saved_vocabulary, self._scratch_vocab, kind="wordpiece"))
        # A resumed run: config.init's vocabulary must still be the one the run started with.
        source = (f"config.data.vocab_file={data.vocab_file!r}"
                  if config.init == "scratch" else f"the vocabulary of config.init={config.init!r}")
        tokenizer = vocabulary.choose(saved_vocabulary, lambda: self.init.tokenizer,
                                      kind="wordpiece", requested=self.init.tokenizer,
                                      where=source)
        if config.init == "scratch" and not data.vocab_file:  # trained on the task's texts
            self.vocabulary_settings = ("data.vocab_size", "data.lowercase")
        try:
            bert_heads.check_features(self.init.model_config, config.task.features)
        except ValueError as error:
            raise ConfigError(f"config.task.features: {error} (the encoder of "
                              f"init={config.init!r})") from error
        return self.init.model_config, tokenizer

    @staticmethod
    def datasets(config) -> tuple[str, ...]:
        """The dataset's fetched files (source 'local') and config.init's checkpoint."""
        local = _dataset(config).fetched if config.data.source == "local" else ()
        return (*local, *((pretrained.MINILM,) if config.init == pretrained.MINILM else ()))

    @classmethod
    def plan(cls, config, saved_vocabulary=None) -> Resolution:
        """`resolve_init` without building: the sizes of config.init's model and vocabulary,
        pending for a vocabulary trained on the task's texts that is not cached yet."""
        from data.vocab import wordpiece

        check_choice(config, "model.name", ("bert",))
        init = resolve_init(config, scratch_vocab=lambda: vocabulary.choose(
            saved_vocabulary, lambda: wordpiece.cached(**_scratch_vocab_key(config.data)),
            kind="wordpiece"), build=False)
        return Resolution(init.model_config, notes=(init.description,),
                          pending={"model.vocab_size": init.pending} if init.pending else {})

    def resolution(self) -> Resolution:
        return Resolution(self.model_config, notes=(self.init.description,))

    def _head(self):
        task = self.config.task
        return head_model(self.kind, self.model_config, self.dataset.num_labels,
                          features=task.features, head_hidden=task.head_hidden,
                          feature_head=task.feature_head)

    def _scratch_vocab(self):
        from data.vocab import wordpiece

        data = self.config.data
        return wordpiece.load_or_train(
            texts_fn=lambda: (t for e in self._examples(data.train_split)
                              for t in ft_data.texts_of(e, self.kind)),
            **_scratch_vocab_key(data))

    # ---- model -----------------------------------------------------------------------------
    def _shape(self, batch_size: int) -> tuple[int, ...]:
        length = self.config.data.max_seq_length
        if self.kind == "multiple_choice":
            return (batch_size, self.dataset.num_choices, length)
        return (batch_size, length)

    def dummy_inputs(self, batch_size: int) -> dict[str, np.ndarray]:
        return {"input_ids": np.ones(self._shape(batch_size), np.int32)}

    def init_variables(self, rng, inputs):
        """The head's random variables with the pretrained encoder (if any) as params['bert']."""
        variables = self.model.init({"params": rng}, inputs["input_ids"], train=False)
        return replace_encoder(variables, self.init.params)

    def flops_per_example(self) -> float:
        cfg, length = self.model_config, self.config.data.max_seq_length
        forward = flops.encoder_forward_flops(length, cfg.hidden_size, cfg.mlp_dim,
                                              cfg.num_layers)
        if self.kind == "multiple_choice":
            forward *= self.dataset.num_choices
        # A frozen encoder runs forward only; the small heads are left out.
        factor = 1 if self.config.task.features != "none" else flops.TRAIN_FLOPS_FACTOR
        return factor * forward

    # ---- losses and metrics ----------------------------------------------------------------
    def _apply(self, params, batch, *, train: bool, rng=None):
        return self._real_positions(self.model.apply(
            {"params": params}, batch["input_ids"], batch["segment_ids"], batch["input_mask"],
            train=train, rngs=None if rng is None else {"dropout": rng}), batch)

    def _real_positions(self, outputs, batch):
        """A span head's start and end logits with the padding out of their softmaxes (the
        head scores every position, as HF's does; the loss and the answer are over the real
        tokens); other heads' outputs as they are."""
        if self.kind != "span":
            return outputs
        return tuple(mask_padding(logits, batch["input_mask"]) for logits in outputs)

    def _sums(self, params, batch, *, train: bool, rng=None):
        """(loss sum, weight, {metric: (sum, count)}) of one batch."""
        return self._scores(self._apply(params, batch, train=train, rng=rng), batch, train=train)

    def _scores(self, outputs, batch, *, train: bool):
        """`_sums` from the head's outputs."""
        rows = batch["mask"]
        weights = self._loss_weights(batch)
        if self.kind == "tag":
            labels = jnp.maximum(batch["labels"], 0)  # -100 positions have weight 0
            losses = cross_entropy(outputs, labels) * weights
            right = (jnp.argmax(outputs, -1) == labels) * weights
            words = weights.sum()
            all_right = (right.sum(-1) == weights.sum(-1)) * rows
            return losses.sum(), words, {
                "loss": (losses.sum(), words), "token_accuracy": (right.sum(), words),
                "sentence_accuracy": (all_right.sum(), rows.sum()),
                # of every word of the sentences, those max_seq_length cut off counted wrong
                "word_accuracy": (right.sum(), (batch["num_words"] * rows).sum())}
        if self.kind == "span":
            start_logits, end_logits = outputs
            losses = 0.5 * (cross_entropy(start_logits, batch["start_positions"])
                            + cross_entropy(end_logits, batch["end_positions"])) * weights
            count = weights.sum()
            metrics = {"loss": (losses.sum(), count)}
            if not train:
                metrics.update(self._span_scores(start_logits, end_logits, batch))
            return losses.sum(), count, metrics
        losses = cross_entropy(outputs, batch["label"]) * weights
        right = (jnp.argmax(outputs, -1) == batch["label"]) * weights
        count = weights.sum()
        return losses.sum(), count, {"loss": (losses.sum(), count),
                                     "accuracy": (right.sum(), count)}

    def _span_scores(self, start_logits, end_logits, batch):
        """exact_match and f1 (over word pieces) of the best span, the best over references."""
        start, end, _ = best_span(start_logits, end_logits, self.config.task.max_answer_length,
                                  batch["context_mask"])
        exact, f1 = exact_match_and_f1(start, end, batch["answer_starts"], batch["answer_ends"])
        rows = batch["mask"]
        return {"exact_match": ((exact * rows).sum(), rows.sum()),
                "f1": ((f1 * rows).sum(), rows.sum())}

    # ---- pure functions the trainer jits ---------------------------------------------------
    def _loss_weights(self, batch):
        """1 for what the loss averages over: each real example, each tagged word (tag), each
        example whose answer is inside the input (span)."""
        rows = batch["mask"]
        if self.kind == "tag":
            return batch["label_weights"] * rows[:, None]
        if self.kind == "span":
            return batch["answer_weight"] * rows
        return rows

    def loss_normalizers(self, batch):
        return {"cross_entropy": self._loss_weights(batch).sum()}

    def loss_fn(self, params, batch, rng):
        """The cross-entropy summed over what it averages over, and the metric sums."""
        loss, _, metrics = self._sums(params, batch, train=True, rng=rng)
        del metrics["loss"]  # the train step logs its objective, this mean, as `loss`
        return {"cross_entropy": loss}, metrics

    def eval_fn(self, params, batch):
        return self._sums(params, batch, train=False)[2]

    # ---- data --------------------------------------------------------------------------------
    def check_eval_split(self) -> None:
        self._examples(self.config.data.eval_split)  # a misspelt split costs no training

    def _examples(self, split: str):
        try:
            return self.dataset.examples(split, source=self.config.data.source)
        except DataError as error:
            raise DataError(f"config.data.name={self.dataset.name!r}: {error}") from error

    def train_iterator(self, *, batch_size: int, seed: int, process_index: int,
                       process_count: int):
        examples = self._examples(self.config.data.train_split)
        self._num_train_examples = len(examples)
        return ft_data.finetune_batches(examples, self.encoder, batch_size=batch_size,
                                        train=True, seed=seed, process_index=process_index,
                                        process_count=process_count)

    def eval_batches(self, *, batch_size: int, process_index: int, process_count: int):
        examples = self._examples(self.config.data.eval_split)
        iterator = ft_data.finetune_batches(examples, self.encoder, batch_size=batch_size,
                                            train=False, process_index=process_index,
                                            process_count=process_count)
        return iterator, num_batches(len(examples), batch_size=batch_size,
                                             process_count=process_count)

    def data_metrics(self, train_iterator) -> dict[str, int]:
        """Examples this process has fed so far, and how many were truncated / had their answer
        cut away."""
        return counts.long_example_counts(train_iterator)

    def derived_data_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        """The epochs all processes together have made (`totals`: summed over processes)."""
        if not self._num_train_examples:
            return {}
        return {"epochs": totals["examples"] / self._num_train_examples}


def head_model(kind: str, cfg, num_labels: int, *, features: str = "none",
               head_hidden: int = 256, feature_head: str = "bilstm"):
    """The head of models/bert_heads.py that BERT's Fig. 4 draws for data of `kind`."""
    if kind in ("classify", "pair_classify"):
        return bert_heads.BertForSequenceClassification(cfg, num_labels=num_labels,
                                                        features=features,
                                                        head_hidden=head_hidden)
    if kind == "tag":
        return bert_heads.BertForTokenClassification(cfg, num_labels=num_labels,
                                                     features=features, head_hidden=head_hidden,
                                                     feature_head=feature_head)
    if kind == "span":
        return bert_heads.BertForQuestionAnswering(cfg)
    return bert_heads.BertForMultipleChoice(cfg)


def _dataset(config):
    try:
        return get_dataset(config.data.name)
    except DataError as error:
        raise ConfigError(f"config.data.name: {error}") from error
