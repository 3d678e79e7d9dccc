"""What the trainer is generic over: a task builds its model and data from the config and gives
the pure functions the trainer jits.

Constructed as `Task(config, saved_vocabulary)`: the second is the vocabulary kept in the run's
workdir (train/vocabulary.py) or None; a task with a vocabulary uses it at a resumed run's start
(`vocabulary.choose`), one without refuses it.

Required (see train/tasks/classify.py for a complete example):
  dummy_inputs(batch_size) -> dict            inputs for shape-only initialisation
  init_variables(rng, inputs) -> variables     the model's `init`
  flops_per_example() -> float                 training FLOPs of one example (for MFU)
  loss_fn(params, batch, rng) -> (terms, metrics)
      terms    {term: the sum of that loss term over the batch's examples (or tokens)}
      metrics  {name: (sum, count)}; not 'loss': the train step logs the objective as that
  loss_normalizers(batch) -> {term: count}     what each term is a mean over (real examples,
                                               target tokens, predicted positions), read from
                                               the batch alone (its masks), with loss_fn's keys
  eval_fn(params, batch) -> {name: (sum, count)}
  train_iterator(batch_size, seed, process_index, process_count) -> grain iterator
  eval_batches(batch_size, process_index, process_count) -> (iterator, batches per process)
  d_model                                      width used by the inverse-sqrt schedule
  model_config                                 the frozen dataclass the model is built from
  plan(config, saved_vocabulary) -> Resolution a classmethod: what `resolution()` will be, from
                                               what is cheap to read (no vocabulary trained, no
                                               weights read): `python -m train --print_config`

Optional, with the defaults below:
  derived_metrics(values)  metrics computed on the host from the averaged ones (perplexity)
  decode_every             None: the task does not generate; 0: generate at the end only;
                           N: also every N steps (on the eval split, with the eval)
  predict_fn(params, batch) -> {name: array}   a jittable generation step (beam search)
  score_predictions(outputs, log) -> metrics   host-side scoring of the gathered outputs (BLEU)
  data_metrics(train_iterator) -> counts       whole-number counters of this process's input
                                               pipeline (examples, dropped, truncated); the
                                               trainer sums them over the processes and logs them
  derived_data_metrics(totals) -> metrics      values computed from those sums (epochs)
  datasets(config) -> names (static)           the `python -m data.fetch` names a run of
                                               `config` reads; get_task checks them all before
                                               building the task (data/fetched.py)
  flops_per_example_at(step) -> float          FLOPs of one example at train step `step`, for
                                               tasks whose cost changes during a run (BERT's
                                               longer phase 2); flops_per_example() otherwise
  global_batch_at(step) -> int                 examples in the global batch of train step
                                               `step` (BERT's phase 2 may batch otherwise);
                                               config.data.batch_size otherwise
  train_batch_keys(config) -> keys (static)    the config.data keys of every global training
                                               batch size, which must split over the devices
                                               and microbatches: ('batch_size',) otherwise
  tokenizer                a text task's vocabulary (data/vocab/wordpiece.py, data/vocab/sentencepiece.py),
                           which the trainer keeps in the workdir; None for image tasks
  vocabulary_settings      the config keys that decided it ('data.vocab_size', ...); () when it
                           came from a file or a pretrained model
  trained_parameters       None (every parameter trains), or the top-level parameter names the
                           optimizer updates, the others frozen (train/optimizers.py `freeze`):
                           a linear probe's ('head',)
  resolution() -> Resolution   what the task decided beyond its config (train/run_config.py):
                           the model that runs, other values set as it started, the lines the
                           trainer prints (where the weights came from); the workdir's
                           config.json records it. Default: `model_config` alone.
  has_frozen_params        True for a task that reads a model it does not train (a distillation
                           teacher). It then gives
    frozen_params() -> (abstract, values)   the frozen model's parameters: `abstract` their
                           shapes with logical axis names (jax.eval_shape of its init, boxed),
                           `values` the same tree as host NumPy arrays; the trainer places them
                           once, sharded like the trained parameters by their logical axes
                           (train/partitioning.py place), outside the train state (so outside
                           the optimizer state and the checkpoints), and passes them as
                           `frozen` to
    loss_fn(params, batch, rng, frozen) and eval_fn(params, batch, frozen)
                           instead of the two above; `frozen` is not an argument of what the
                           train step differentiates, so it gets no gradient and no update.
Eval batches may carry non-numeric entries (reference strings); the trainer sends only numeric
arrays to the devices.
"""

from __future__ import annotations

import jax.numpy as jnp

from train.run_config import Resolution


def batch_objective(terms: dict, normalizers: dict):
    """What a train step minimises: the sum over loss terms of each term's mean over the batch,
    sum(terms[t] / normalizers[t]). The normalizers are counted over the whole batch, so summing
    this over microbatches (each with its own term sums, the same normalizers) gives the
    objective of the whole batch exactly: gradient accumulation changes nothing."""
    if set(terms) != set(normalizers):
        raise ValueError(f"loss terms {sorted(terms)} and normalizers {sorted(normalizers)} must "
                         "have the same names")
    return sum(terms[t] / jnp.maximum(normalizers[t], 1.0) for t in sorted(terms))


def call_loss(task, params, batch, rng, frozen):
    """`task.loss_fn`, given the frozen parameters when the task reads some (`frozen` is None
    for the others). A task object that is not a `Task` (a test's minimal one) has none."""
    if getattr(task, "has_frozen_params", False):
        return task.loss_fn(params, batch, rng, frozen)
    return task.loss_fn(params, batch, rng)


def eval_fn_of(task):
    """The task's eval function as the trainer jits it: (params, batch, frozen) -> metrics."""
    if task.has_frozen_params:
        return task.eval_fn
    return lambda params, batch, frozen: task.eval_fn(params, batch)


class Task:
    # The keys of config.task and config.data the task reads (each subclass lists all of its
    # own): a key of those sections that is not listed is a typo, refused at the start
    # (train/start_checks.py), not trained without.
    TASK_KEYS: tuple[str, ...] = ("name",)
    DATA_KEYS: tuple[str, ...] = ("source", "train_split", "eval_split", "batch_size",
                                  "eval_batch_size")
    decode_every: int | None = None
    trained_parameters: tuple[str, ...] | None = None
    tokenizer = None
    vocabulary_settings: tuple[str, ...] = ()
    has_frozen_params: bool = False

    @classmethod
    def plan(cls, config, saved_vocabulary=None) -> Resolution:
        raise NotImplementedError(f"{cls.__name__} has no plan")

    def resolution(self) -> Resolution:
        return Resolution(self.model_config)

    def derived_metrics(self, values: dict[str, float]) -> dict[str, float]:
        return values

    def predict_fn(self, params, batch):
        raise NotImplementedError(f"{type(self).__name__} does not generate")

    def score_predictions(self, outputs: list[dict], log) -> dict[str, float]:
        raise NotImplementedError(f"{type(self).__name__} does not generate")

    def flops_per_example_at(self, step: int) -> float:
        return self.flops_per_example()

    def global_batch_at(self, step: int) -> int:
        return self.config.data.batch_size

    @staticmethod
    def train_batch_keys(config) -> tuple[str, ...]:
        return ("batch_size",)

    def data_metrics(self, train_iterator) -> dict[str, int]:
        return {}

    def derived_data_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        return {}

    @staticmethod
    def datasets(config) -> tuple[str, ...]:
        return ()

    def check_eval_split(self) -> None:
        """DataError when config.data.eval_split cannot be read, checked before training so that
        a misspelt split costs no steps (the first eval reads it). Tasks reading their eval
        split from a data source (`_source`, opened lazily) open it here; others read it whole
        at the start anyway."""
        source = getattr(self, "_source", None)
        if source is not None:
            source(self.config.data.eval_split)
