"""The training loop: sharded state, jitted steps, evals, checkpoints, logging.

One code path for 1 CPU, N GPUs or a multi-host TPU pod:
  1. the mesh comes from the config, the task (model + data + loss) from `config.task.name`;
  2. the train state is initialised *directly into its shardings*: `jax.eval_shape` gives the
     abstract state with logical axis names, the rules turn them into NamedShardings, and
     `jax.jit(init, out_shardings=...)` materialises each shard on its own device;
  3. the step (train/train_step.py) is `jax.jit(train_step, in_shardings, out_shardings,
     donate_argnums=0)` - pjit;
  4. each process loads its own slice of every global batch, assembled with
     `jax.make_array_from_process_local_data`;
  5. metrics go to metrics.jsonl / TensorBoard, checkpoints (state + data position) to orbax.

A task that reads a model it does not train (a distillation teacher, train/tasks/base.py) gives
its parameters once; they are placed sharded by their logical axes like the trained ones and
passed to every train and eval step beside the state, never into the optimizer or the
checkpoints: a resumed run reads them again from where the task found them, and the task
records what it read (e.g. a fingerprint) in config.json, which a resume must find unchanged
(train/run_config.py check_resumed).

With train.ema_decay > 0 the state holds an exponential moving average of the parameters
(train/train_step.py ema_update), sharded like them and checkpointed with them; every eval then
also evaluates the average, its metrics logged beside the raw weights' as `ema.<name>` (e.g.
`ema.accuracy`).
"""

from __future__ import annotations

import contextlib
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from data.errors import DataError
from train import partitioning, run_config, storage, vocabulary
from train.checkpoint_averaging import average_params, steps_to_average
from train.checkpointing import CheckpointError, Checkpointer
from train.config import ConfigError
from train.distributed import differing_processes, together
from train.flops import compute_dtype, data_sheet_peak, measured_peak_flops
from train.metrics_writer import MetricsWriter, summarize
from train.optimizers import freeze, make_optimizer
from train.preemption import Preemption
from train.start_checks import validate_batching
from train.step_log import StepLog
from train.tasks import get_task
from train.tasks.base import eval_fn_of
from train.train_step import TrainState, ema_init, make_train_step


def _numeric(batch: dict) -> dict:
    """The arrays of a host batch that go to the devices; strings (references) stay here."""
    return {k: v for k, v in batch.items() if np.asarray(v).dtype.kind in "biuf"}


def _sum_metrics(total, new):
    return jax.tree.map(jnp.add, total, new)


# The errors a failure on another process is raised as on this one (distributed.together), so
# that every process exits alike (python -m train: 2 or 3).
_STOPS = (ConfigError, DataError, partitioning.MeshError, CheckpointError)


class Trainer:
    """Builds everything a run needs from the config; `run()` trains and returns final evals."""

    def __init__(self, config: ml_collections.ConfigDict, workdir: str | os.PathLike, *,
                 fresh_start: bool = False):
        self.config = config
        self.workdir = storage.run_path(workdir)  # absolute, or a gs:// URL
        self.fresh_start = fresh_start  # train from step 0 when every checkpoint was set aside
        self.preemption: Preemption | None = None  # the signal handling of the last run()
        self.process_index, self.process_count = jax.process_index(), jax.process_count()
        # Each host reads its own files here (the task's data, vocabulary and weights), so this
        # may fail on one process only: then every process stops (and no collective runs here).
        with together("setting up the task", _STOPS):
            self._build(config)
        self._check_same_vocabulary()

    def _build(self, config: ml_collections.ConfigDict) -> None:
        """The mesh, the task, the optimizer, the abstract state in its shardings, the frozen
        parameters and the jitted steps."""
        self.mesh = partitioning.make_mesh(config.mesh)
        self.rules = partitioning.LOGICAL_RULES
        validate_batching(config, self.mesh)
        self.task = self._make_task()
        try:
            self.optimizer, self.schedule = make_optimizer(
                config.optimizer, d_model=self.task.d_model, num_steps=config.train.num_steps)
        except ValueError as error:
            # optimizers.py names its keys config.optimizer.*; a message about another argument
            # (e.g. the model's d_model) is passed on as it is, not given a key it does not have
            raise ConfigError(str(error)) from error
        if self.task.trained_parameters is not None:  # e.g. a linear probe: the rest frozen
            self.optimizer = freeze(self.optimizer, self.task.trained_parameters)

        def init_state(rng):
            params_rng, dropout_rng = jax.random.split(rng)
            inputs = self.task.dummy_inputs(1)
            params = self.task.init_variables(params_rng, inputs)["params"]
            ema = ema_init(params) if config.train.ema_decay else None  # ema_0 = theta_0
            return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                              opt_state=self.optimizer.init(params), rng=dropout_rng,
                              ema_params=ema)

        with self._context():
            boxed = jax.eval_shape(init_state, jax.random.PRNGKey(config.seed))
            self.state_shardings = partitioning.logical_shardings(boxed, self.mesh, self.rules)
            try:
                partitioning.check_divisible(boxed, self.state_shardings, self.mesh)
            except partitioning.MeshError as error:
                raise ConfigError(str(error)) from None
            self._init = jax.jit(lambda rng: nn.meta.unbox(init_state(rng)),
                                 out_shardings=self.state_shardings)
        self.abstract_state = jax.tree.map(
            lambda leaf, sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding),
            nn.meta.unbox(boxed), self.state_shardings)
        self.num_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(self.abstract_state.params))
        self.frozen = self._place_frozen()  # None, or e.g. a distillation teacher's parameters
        frozen_shardings = jax.tree.map(lambda x: x.sharding, self.frozen)

        batch_sharding = partitioning.batch_sharding(self.mesh)
        replicated = partitioning.replicated(self.mesh)
        step_fn = make_train_step(self.task, self.optimizer, self.schedule, config.train)
        self._train_step = jax.jit(
            step_fn, in_shardings=(self.state_shardings, batch_sharding, frozen_shardings),
            out_shardings=(self.state_shardings, replicated), donate_argnums=0)
        self._eval_step = jax.jit(
            eval_fn_of(self.task),
            in_shardings=(self.state_shardings.params, batch_sharding, frozen_shardings),
            out_shardings=replicated)
        # Generation (beam search) for tasks scored on their outputs, e.g. BLEU; the outputs come
        # back replicated, so process 0 can score every example.
        self._predict_step = (None if self.task.decode_every is None else jax.jit(
            self.task.predict_fn, in_shardings=(self.state_shardings.params, batch_sharding),
            out_shardings=replicated))

    def _make_task(self):
        """The config's task, given the vocabulary its checkpoints were trained with when the
        workdir has one (train/vocabulary.py): a resumed run never depends on the cache; before
        the first checkpoint the vocabulary is built again from the config."""
        self.saved_vocabulary = vocabulary.for_start(self.workdir)
        task = get_task(self.config, self.saved_vocabulary)
        if self.saved_vocabulary is not None:
            vocabulary.check_settings(self.workdir, vocabulary.settings_of(
                self.config, task.vocabulary_settings))
        return task

    def _check_same_vocabulary(self) -> None:
        """DataError on every process when some built another vocabulary than process 0's."""
        if self.task.tokenizer is not None:
            differ = differing_processes(vocabulary.fingerprint(self.task.tokenizer))
            if differ:
                raise DataError(
                    f"processes {differ} built another vocabulary than process 0 (the vocabulary "
                    "cache differs between hosts): point every host's data root "
                    "(PAPERS_JAX_DATA) and --workdir at the same shared folder")

    def _place_frozen(self):
        """The task's frozen parameters on the devices (None for a task without), sharded by
        their logical axes (train/partitioning.py place)."""
        if not self.task.has_frozen_params:
            return None
        abstract, values = self.task.frozen_params()
        return partitioning.place(values, abstract, self.mesh, self.rules)

    def _context(self):
        """Mesh and logical rules in scope while tracing, so activation constraints resolve."""
        stack = contextlib.ExitStack()
        stack.enter_context(jax.set_mesh(self.mesh))
        stack.enter_context(nn.logical_axis_rules(self.rules))
        return stack

    # ---- pieces -----------------------------------------------------------------------------
    def init_state(self) -> TrainState:
        with self._context():
            return self._init(jax.random.PRNGKey(self.config.seed))

    def train_step(self, state: TrainState, local_batch: dict) -> tuple[TrainState, dict]:
        with self._context():
            return self._train_step(state, partitioning.global_batch(_numeric(local_batch),
                                                                     self.mesh), self.frozen)

    def evaluate(self, params, *, decode: bool = False, log=print) -> dict[str, float]:
        """Metrics over the whole eval split; every process runs the same number of steps.

        With `decode`, the task also generates for every eval example (its `predict_fn`) and
        scores the outputs on the host (`score_predictions`, e.g. BLEU; samples go to `log`).
        """
        global_size = self.config.data.eval_batch_size
        local_size = global_size // self.process_count
        iterator, num_batches = self.task.eval_batches(
            batch_size=local_size, process_index=self.process_index,
            process_count=self.process_count)
        totals, outputs = None, []
        with self._context():
            for _ in range(num_batches):  # padded batches (mask 0) keep every process in step
                batch = partitioning.global_batch(_numeric(next(iterator)), self.mesh)
                metrics = self._eval_step(params, batch, self.frozen)
                totals = metrics if totals is None else _sum_metrics(totals, metrics)
                if decode:
                    outputs.append(self._predict_step(params, batch))
        values = self.task.derived_metrics(summarize(jax.device_get(totals)))
        if decode:
            values.update(self.task.score_predictions(jax.device_get(outputs), log))
        return values

    def evaluate_state(self, state: TrainState, *, decode: bool = False,
                       log=print) -> dict[str, float]:
        """`evaluate` of the state's parameters and, with train.ema_decay > 0, of their moving
        average too, its metrics as `ema.<name>`."""
        return {**self.evaluate(state.params, decode=decode, log=log),
                **self._evaluate_ema(state, decode=decode, log=log)}

    def _evaluate_ema(self, state: TrainState, *, decode: bool, log) -> dict[str, float]:
        """The eval of the state's moving average of the weights as `ema.<name>` ({} without)."""
        if state.ema_params is None:
            return {}
        averaged = self.evaluate(state.ema_params, decode=decode, log=log)
        return {f"ema.{name}": value for name, value in averaged.items()}

    def _peak_flops(self) -> tuple[float, str]:
        """(per-device peak FLOP/s, where it comes from): the config's; a GPU's or TPU's data
        sheet for a bfloat16 model (train/flops.py data_sheet_peak); or measured here."""
        configured = self.config.train.peak_flops
        if configured > 0:
            return configured, "config.train.peak_flops"
        device, dtype = jax.devices()[0], str(compute_dtype(self.task.model_config))
        sheet = data_sheet_peak(device, dtype)
        if sheet:
            return sheet, f"the {device.device_kind} data sheet's dense bf16 peak"
        return (measured_peak_flops(dtype),
                f"{dtype} matmuls measured here by train/flops.py measure_matmul_peak")

    # ---- the loop ---------------------------------------------------------------------------
    def _decodes_at(self, done: int) -> bool:
        """Whether the eval after `done` steps also generates (task.decode_every; always at the
        end for a task that generates)."""
        every = self.task.decode_every
        if self._averages_at(done):  # the end's decode is of the averaged parameters
            return False
        return every is not None and (done == self.config.train.num_steps or
                                      (every > 0 and done % every == 0))

    def _averages_at(self, done: int) -> bool:
        """Whether the eval after `done` steps is the final one of the average of the last
        train.average_checkpoints checkpoints (train/checkpoint_averaging.py), made after the
        loop once the last checkpoint is written, instead of one of the final parameters."""
        return self.config.train.average_checkpoints > 0 and done == self.config.train.num_steps

    def _evaluate_average(self, checkpointer: Checkpointer, state: TrainState,
                          log) -> dict[str, float]:
        """The final eval (and decode) of the average of the run's last checkpoints, and of the
        final state's moving average of the weights when it has one (`ema.<name>`)."""
        checkpointer.wait()
        steps = steps_to_average(checkpointer.all_steps(), self.config.train.average_checkpoints)
        log(f"the final eval is of the average of the last {len(steps)} checkpoints, steps "
            f"{', '.join(map(str, steps))} (train.average_checkpoints="
            f"{self.config.train.average_checkpoints})")
        with self._context():
            params = average_params(checkpointer, self.abstract_state, steps, log)
        decode = self.task.decode_every is not None
        values = self.evaluate(params, decode=decode, log=log)
        values["averaged_checkpoints"] = len(steps)
        return {**values, **self._evaluate_ema(state, decode=decode, log=log)}

    def _restore_or_init(self, checkpointer: Checkpointer
                         ) -> tuple[TrainState, tuple[dict, int] | None, list]:
        """The state to train from: the newest usable checkpoint (every process restores the
        same step: Checkpointer.restore_latest_good), or a new one; with the (data state, step)
        restored (None for a new one), and the notes of the restore."""
        notes = []
        restored = checkpointer.restore_latest_good(self.abstract_state, notes.append)
        if restored is None:  # before the init (a collective, and a whole state in memory)
            with together("checking a start from step 0", _STOPS):
                notes += checkpointer.check_start_from_scratch(self.fresh_start)
            return self.init_state(), None, notes
        return restored[0], restored[1:], notes

    def _check_start(self, checkpointer: Checkpointer, train_iter,
                     restored: tuple[dict, int] | None, notes: list) -> list:
        """Before the first step: a restored state beyond train.num_steps or of another task is
        refused; the data position restored. Returns `notes` with those to print added."""
        if restored is None:
            notes.extend(self.task.resolution().notes)  # e.g. which weights, from where
        else:
            data_state, step = restored
            if step > self.config.train.num_steps:  # nothing to train; the record would say less
                raise ConfigError(
                    f"config.train.num_steps={self.config.train.num_steps} is below step {step}, "
                    f"the checkpoint in {checkpointer.directory}: a run does not train back. Set "
                    f"it to {step} or more, read that step with python -m train.evaluate, or "
                    "train in a new --workdir")
            run_config.check_resumed(self.workdir, self.task.resolution())
            train_iter.set_state(data_state["train_iterator"])
            notes.append(f"resumed from {checkpointer.directory} at step {step}")
            if self.fresh_start:
                notes.append("--fresh_start is not used: it applies only where every checkpoint "
                             "was set aside as damaged, and a usable one was resumed (to train "
                             "from step 0, use a new --workdir)")
        return notes

    def _write_run_files(self, notes: list) -> list:
        """The workdir's run files, once every process's start checks passed: config.json,
        requested_config.json and, at a text run's first start, its vocabulary. Returns `notes`
        with those to print added."""
        storage.make_folder(self.workdir)  # only now: no empty one if stopped
        if self.process_index == 0:  # only now: a checkpoint that does not fit keeps its config
            run_config.write(self.workdir, self.config, self.task.resolution())
            if self.task.tokenizer is not None and self.saved_vocabulary is None:
                path = vocabulary.save(self.workdir, self.task.tokenizer, vocabulary.settings_of(
                    self.config, self.task.vocabulary_settings))
                notes.append(f"the run's vocabulary ({self.task.tokenizer.vocab_size} tokens) "
                             f"is kept in {path}")
        return notes

    def run(self, until_step: int | None = None) -> dict[str, float]:
        """Trains from the latest checkpoint (or from scratch) to train.num_steps, or only up to
        `until_step` (checkpointed there, so a later run() continues), and returns the last eval.

        SIGTERM / SIGINT from the first train step on (once it is compiled and dispatched): the
        current step is checkpointed (waiting until it is committed) and run() returns early with
        `self.interrupted` set to the signal's name. Before it the caller's handlers apply
        (Python's KeyboardInterrupt; `python -m train` exits 130 or 143), with nothing saved.
        With several processes, a signal to any of them stops all of them after the same step,
        one or two after the signal's (train/preemption.py).
        """
        cfg = self.config.train
        stop = cfg.num_steps if until_step is None else min(until_step, cfg.num_steps)
        global_batch = self.config.data.batch_size
        # Setup that reads each host's own files runs in `together` blocks, between which the
        # collectives lie (orbax's barriers, the restore, the init, the first step): a failure
        # on one process then stops every process, naming it, and none waits on the others.
        with together("opening the data", _STOPS):  # data errors surface before any writing
            train_iter = self.task.train_iterator(
                batch_size=global_batch // self.process_count, seed=self.config.seed,
                process_index=self.process_index, process_count=self.process_count)
            self.task.check_eval_split()
        checkpointer = Checkpointer(self.workdir / "checkpoints", save_every=cfg.checkpoint_every,
                                    keep=cfg.keep_checkpoints, async_save=cfg.async_checkpoint,
                                    keep_on_interval=cfg.average_checkpoints > 0)
        state, restored, notes = self._restore_or_init(checkpointer)
        with together("checking the start", _STOPS):  # before process 0 writes anything
            notes = self._check_start(checkpointer, train_iter, restored, notes)
        with together("preparing the first step", _STOPS):
            notes = self._write_run_files(notes)
            start = self.start_step = int(jax.device_get(state.step))
            writer = MetricsWriter(self.workdir, total_steps=cfg.num_steps, start_step=start,
                                   progress_bar=cfg.progress_bar)
            for note in notes:
                writer.message(note)
            flops_per_step = (self.task.flops_per_example_at(start)
                              * self.task.global_batch_at(start))
            self.peak_flops, self.peak_flops_source = self._peak_flops()  # per device; recorded
            peak = self.peak_flops * jax.device_count()
            frozen = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(self.frozen))
            writer.message(f"{self.num_params:,} parameters"
                           f"{f' (and {frozen:,} frozen)' if frozen else ''}; "
                           f"mesh {dict(self.mesh.shape)}; {flops_per_step / 1e9:.3g} GFLOPs per "
                           f"step; peak {peak / 1e9:.3g} GFLOP/s ({self.peak_flops_source})")
            log = StepLog(self.task, peak_flops=peak, skip_nonfinite=cfg.nonfinite == "skip")
            preemption = self.preemption = Preemption(self.mesh)
        self.interrupted = None
        final_eval: dict[str, float] = {}

        def kept() -> str:  # the last good checkpoint, for a NaN's message
            latest = checkpointer.latest_step()
            return ("no checkpoint had been written yet" if latest is None else
                    f"the last good checkpoint, step {latest}, is kept in {checkpointer.directory}")

        try:
            for step in range(start, stop):
                state, metrics = self.train_step(state, log.next_batch(train_iter))
                preemption.arm()  # compiled and running: from now on a signal saves the step
                log.add(step, metrics)
                done = step + 1
                if step == start and done % cfg.log_every and done != stop:
                    log.after_compile(metrics)  # the window's rates: the steps after this one
                # The signals are read once a step: one that arrives later (while this step is
                # logged, evaluated or saved) stops the run after the next step, which is then
                # saved; read again below, the step reported saved could be one never saved.
                # With several processes, all stop a step later, together (preemption.py).
                signalled = preemption.stop_now()
                stopping = done == stop or signalled
                if done % cfg.log_every == 0 or stopping:
                    log.check_finite(kept())
                    values, steps = log.flush(train_iter)
                    writer.write(done, "train", values)
                    writer.advance(steps, loss=values["loss"], steps_s=values["steps_per_second"])
                if done % cfg.checkpoint_every == 0 or stopping:  # saved before an eval fails
                    log.check_finite(kept())  # a non-finite step is never checkpointed
                    checkpointer.save(done, state, {"train_iterator": train_iter.get_state()},
                                      force=True)
                decode = self._decodes_at(done)
                evaluate = ((cfg.eval_every and done % cfg.eval_every == 0)
                            or done == cfg.num_steps or decode)
                if evaluate and not self._averages_at(done):
                    log.check_finite(kept())  # never evaluates (or decodes with) NaN weights
                    final_eval = self.evaluate_state(state, decode=decode, log=writer.message)
                    writer.write(done, "eval", final_eval)
                    log.restart_clock()  # eval time is not train time
                if signalled:
                    checkpointer.wait()  # committed before we exit; more signals are ignored
                    self.interrupted = preemption.cause
                    writer.message(f"received {self.interrupted}: saved checkpoint at step {done} "
                                   f"in {checkpointer.directory}; run the same command to resume")
                    break
            reached = int(jax.device_get(state.step)) >= cfg.num_steps
            if reached and not self.interrupted and self._averages_at(cfg.num_steps):
                final_eval = self._evaluate_average(checkpointer, state, writer.message)
                writer.write(cfg.num_steps, "eval", final_eval)
            elif start >= cfg.num_steps:  # nothing left to train: evaluate what was restored
                final_eval = self.evaluate_state(
                    state, decode=self.task.decode_every is not None, log=writer.message)
        finally:
            checkpointer.wait()
            checkpointer.close()
            writer.close()
            preemption.disarm()
        self.final_state = state
        return final_eval
