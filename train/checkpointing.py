"""Checkpoints of a run: the train state and the data-iterator state, through orbax.

One step directory per saved step, holding two items:

    state   the train-state pytree of jax.Arrays (params, optimizer state, step, rng key), written
            with orbax's standard pytree handler; restored straight into the shardings the caller
            asks for, which may differ from the ones it was saved with (other mesh, other
            device count).
    data    a small JSON dict per process: the data-iterator state and anything else small
            (e.g. epoch), one file `process_<i>-of-<n>.json` for each of the n processes, since
            each process reads its own shard of the data and so has its own position in it.

Typed rng keys (`jax.random.key(0)`) save and restore as they are (orbax 0.12.8 stores the key
data with its implementation), so the state may hold one directly.

Saving is asynchronous by default: `save` returns once the arrays are copied off the devices
(so the caller may donate or delete them right away) and the files are written in a background
thread. `wait()` blocks until the last save is on disk; `close()` waits too. A save that is
still running when the next `save` starts is waited for first.

Multi-host: every process must call `save`, `restore`, `restore_latest_good`, `wait` and
`close` with the same arguments (saving is collective: orbax synchronises the processes and each
writes its own shards; restore_latest_good too: the processes agree on each restore's outcome),
except `data_state`, which is each process's own. `restore` gives every process the
data state it saved; with another number of processes than saved it, each process gets process
0's, and `warn` says that the data order does not continue exactly. `latest_step()` reads a
per-process cache of the directory, the same on every process.

Damage (`restore_latest_good`): a step is set aside only when its files prove it damaged
(train/checkpoint_damage.py reads them by itself, cheaply before every restore and in full
after a failed one): a missing item; a missing, truncated or undecodable array file or index;
metadata or a data state that is not JSON. It is renamed to `<step>.corrupt-<unix time>`, kept
for inspection, and the previous step is tried (process 0 renames, the others wait for it). Any
other failure stops the run with a CheckpointError that names the step, the error and what to
do, and moves nothing: out of memory, a permission, an OSError such as EIO or ETIMEDOUT from a
network filesystem, a timeout, files that cannot be read to judge them, anything not proven to
be damage; KeyboardInterrupt goes through as it is. A restore may fail on some processes only
(bytes that do not decode are read by the processes whose shards lie there): after each try
the processes agree on its outcome (checkpoint_damage.py agreed_damage), so all set the step
aside, or all stop. A step of another train state (CheckpointMismatchError) is refused and
left alone. When every step was set aside nothing is restored, and `check_start_from_scratch`
refuses to train again from step 0 over them unless asked to (a fresh start keeps them).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from orbax.checkpoint import checkpoint_managers as policies

from train import storage
from train.distributed import differing_processes, together
from train.checkpoint_damage import (DATA, LEGACY_DATA_FILE, PROCESS_FILE, STATE,
                                     CheckpointDamagedError, CheckpointError, agreed_damage,
                                     find_damage, judge_failure, process_file)
from train.checkpoint_shapes import array_shapes, state_differences
from train.workdir_lock import training_in

_SET_ASIDE = re.compile(r"(\d+)\.corrupt-\d+")  # a damaged step's folder, renamed
# On gs:// orbax marks a step (and each of its items) saved whole with this file; a step folder
# without it is a half-written one, which orbax ignores and removes.
_COMMIT_MARKER = "commit_success.txt"


class CheckpointMismatchError(CheckpointError):
    """A checkpoint that reads back but holds another train state than the run's (another model,
    optimizer or layer layout). Not damage: it is left where it is."""


class LatestOnInterval(policies.PreservationPolicy):
    """Keeps the last `keep` checkpoints whose step is a multiple of `interval`, and the newest
    checkpoint whatever its step. A checkpoint written between two (at a stop, a preemption or
    the end of a run that is not a multiple) is dropped once a newer one is written, so stops
    never push interval checkpoints out: what checkpoint averaging needs
    (train/checkpoint_averaging.py), where a resumed run must find the checkpoints an
    uninterrupted one would."""

    def __init__(self, keep: int, interval: int):
        self.keep, self.interval = keep, interval

    def should_preserve(self, checkpoints, *, context) -> list[bool]:
        on_interval = [i for i, info in enumerate(checkpoints) if info.step % self.interval == 0]
        kept = set(on_interval[-self.keep:]) | ({len(checkpoints) - 1} if checkpoints else set())
        return [i in kept for i in range(len(checkpoints))]


class Checkpointer:
    """Keeps the last `keep` checkpoints of a run, saving every `save_every` steps; with
    `keep_on_interval`, the last `keep` on the save_every interval and the newest
    (LatestOnInterval)."""

    def __init__(self, directory: str | os.PathLike, *, save_every: int, keep: int,
                 async_save: bool = True, keep_on_interval: bool = False):
        if save_every < 1:
            raise ValueError(f"save_every={save_every} must be >= 1.")
        if keep < 1:
            raise ValueError(f"keep={keep} must be >= 1.")
        self.directory = storage.run_path(directory)
        self.save_every = save_every
        retention = (dict(preservation_policy=LatestOnInterval(keep, save_every))
                     if keep_on_interval else dict(max_to_keep=keep))
        options = ocp.CheckpointManagerOptions(
            **retention,
            save_interval_steps=save_every,
            enable_async_checkpointing=async_save,
            create=False,  # the first save makes the directory: a run stopped before it
                           # leaves none, empty, behind
            cleanup_tmp_directories=True,  # half-written steps of a killed run never count
            # Orbax's default policy also saves the first step it is offered in an empty
            # directory; we save on multiples of save_every only (or on preemption, or forced).
            save_decision_policy=policies.AnySavePolicy([
                policies.FixedIntervalPolicy(save_every),
                policies.PreemptionCheckpointingPolicy(),
            ]),
        )
        # The state's handler is named up front so its metadata reads before any restore. The
        # data item: every process writes its own file (primary_host=None: no single writer).
        data_handler = ocp.JsonCheckpointHandler(
            filename=process_file(jax.process_index(), jax.process_count()),
            multiprocessing_options=ocp.options.MultiprocessingOptions(primary_host=None))
        handlers = {STATE: ocp.StandardCheckpointHandler(), DATA: data_handler}
        self._state_handler = handlers[STATE]  # restore reads through it (see there)
        self._manager = ocp.CheckpointManager(directory, options=options, item_names=(STATE, DATA),
                                              item_handlers=handlers)
        self._set_aside_now: list[str] = []  # what restore_latest_good set aside, and why

    # ----- what is there ----------------------------------------------------------------

    def latest_step(self) -> int | None:
        """The newest saved step (including one still being written), or None."""
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def set_aside_folders(self) -> list[str]:
        """The folders of the damaged steps set aside here (`<step>.corrupt-<time>`), by step."""
        folder = self.directory
        found = [(int(m.group(1)), p.name) for p in (folder.iterdir() if folder.is_dir() else ())
                 if (m := _SET_ASIDE.fullmatch(p.name))]
        return [name for _, name in sorted(found)]

    # ----- save / restore ---------------------------------------------------------------

    def save(self, step: int, state: Any, data_state: dict, *, force: bool = False) -> bool:
        """Starts saving `state` and `data_state` as `step`; returns whether a save started.

        Saves when step is a multiple of save_every (or a preemption was signalled), or always
        with force=True, unless this step is already saved (then nothing happens: a forced
        final save right after a periodic one is harmless).
        """
        step = int(step)
        if step in self._manager.all_steps():
            return False
        try:
            json.dumps(data_state)
        except TypeError as e:
            raise TypeError(f"data_state must be a JSON-serialisable dict: {e}") from None
        args = ocp.args.Composite(**{STATE: ocp.args.StandardSave(state),
                                     DATA: ocp.args.JsonSave(data_state)})
        return bool(self._manager.save(step, args=args, force=force))

    def restore(self, abstract_state: Any, step: int | None = None,
                warn: Callable[[str], None] = print) -> tuple[Any, dict, int]:
        """(state, data_state, step) of `step` (None: the latest).

        `abstract_state` is the state's pytree with jax.ShapeDtypeStruct(shape, dtype,
        sharding=...) leaves (e.g. jax.eval_shape of the init, with the run's shardings): each
        array comes back with that sharding and dtype. Concrete arrays also work as targets.
        `data_state` is the one this process saved (see the module's note on multi-host).
        Raises FileNotFoundError if the directory has no checkpoint (or not that step), and
        CheckpointDamagedError if the cheap check of its files (`find_damage` without reading
        the arrays) finds damage. The arrays are read by the state item's handler, not by the
        manager's restore, whose closing barrier would hold the other processes where this one
        failed: restore_latest_good has them agree on the outcome instead.
        """
        self.wait()  # a step still being written is not readable yet
        steps = self.all_steps()
        if step is None:
            if not steps:
                raise FileNotFoundError(f"No checkpoint in {self.directory}.")
            step = steps[-1]
        elif step not in steps:
            raise FileNotFoundError(f"No checkpoint of step {step} in {self.directory}; "
                                    f"saved steps: {steps}.")
        path = self.directory / str(step)
        damage = find_damage(path, read_arrays=False)
        if damage is not None:
            raise CheckpointDamagedError(path, damage)
        self._check_state_matches(step, abstract_state)
        data_state = self._read_data_state(step, warn)
        state = self._state_handler.restore(path / STATE,
                                            args=ocp.args.StandardRestore(abstract_state))
        return state, data_state, step

    def _check_state_matches(self, step: int, abstract_state: Any) -> None:
        """Raises CheckpointMismatchError if the step's saved arrays are not the ones (paths and
        shapes) of `abstract_state`; dtypes may differ (restoring casts). Metadata that cannot
        be read raises whatever orbax raises: that step is damaged."""
        if abstract_state is None:  # restoring as saved: nothing to compare with
            return
        metadata = self._manager.item_metadata(step)[STATE]
        if metadata is None:
            return
        saved = array_shapes(getattr(metadata, "tree", metadata), stored=True)
        differences = state_differences(saved, array_shapes(abstract_state, stored=False))
        if differences:
            path = self.directory / str(step)
            raise CheckpointMismatchError(
                f"checkpoint {path} holds another train state than this run's, so it is left as "
                "it is:\n" + "\n".join(differences) + "\nIt was saved by a run with another "
                "model or optimizer config: resume with that config, or train in a new --workdir.")

    def _read_data_state(self, step: int, warn: Callable[[str], None]) -> dict:
        folder = self.directory / str(step) / DATA
        own = folder / process_file(jax.process_index(), jax.process_count())
        if own.exists():
            return json.loads(own.read_text())
        names = [p.name for p in folder.iterdir()] if folder.exists() else []
        counts = {int(m.group(2)) for name in names if (m := PROCESS_FILE.fullmatch(name))}
        if len(counts) == 1:
            count = counts.pop()
            warn(f"{folder}: the data positions were saved by {count} process(es) and this run "
                 f"has {jax.process_count()}; every process resumes from process 0's position, "
                 "so the data order does not continue exactly where it stopped")
            return json.loads((folder / process_file(0, count)).read_text())
        if (folder / LEGACY_DATA_FILE).exists():
            return json.loads((folder / LEGACY_DATA_FILE).read_text())
        raise FileNotFoundError(
            f"{folder} holds no data state for process {jax.process_index()} of "
            f"{jax.process_count()} (found: {sorted(names) or 'nothing'}): this step's checkpoint "
            "is incomplete; move it out of checkpoints/ to resume from the step before")

    def restore_latest_good(self, abstract_state: Any, warn: Callable[[str], None] = print
                            ) -> tuple[Any, dict, int] | None:
        """Restores the newest checkpoint that reads back whole, newest first; None when every
        step was damaged and set aside.

        A step is set aside only when its files prove damage (`find_damage`: before the restore
        cheaply, after a failed one fully): it is reported with its path and the damage through
        `warn`, renamed to `<step>.corrupt-<unix time>` (kept for inspection, out of orbax's
        sight so the step can be saved again) and the previous one is tried. A failed restore
        whose files are not proven damaged raises CheckpointError, and nothing is renamed; so
        does a step that reads but holds another state (CheckpointMismatchError).
        """
        self.wait()
        steps = self.all_steps()
        self.check_same_steps(steps)  # else processes would restore different steps
        for step in reversed(steps):
            path = self.directory / str(step)
            restored, damage, error = self._try_restore(abstract_state, step, warn)
            damage = agreed_damage(path, damage, error)  # proven on any process: aside on all
            if damage is None:
                return restored
            restored = None  # this process may have read it whole: not two states in memory
            moved = self._set_aside(step)
            line = f"checkpoint {path} cannot be restored: {damage}"
            self._set_aside_now.append(f"  {line} (now {moved})")
            warn(f"{line}; it is set aside as {moved} (kept for inspection) and the previous "
                 "checkpoint is tried")
        return None

    def check_same_steps(self, steps: list[int]) -> None:
        """CheckpointError on every process when some list other steps than process 0 (a
        collective): each would restore another step, or start afresh while others restore."""
        digest = hashlib.sha256(repr(steps).encode()).hexdigest()
        differ = differing_processes(digest)
        if differ:
            raise CheckpointError(
                f"processes {differ} list other checkpoints in {self.directory} than process 0 "
                f"(process {jax.process_index()} lists steps {steps}): every process must read "
                "the same checkpoints folder (one shared filesystem or bucket for --workdir); "
                "nothing was restored or moved")

    def _try_restore(self, abstract_state: Any, step: int, warn: Callable[[str], None]
                     ) -> tuple[tuple[Any, dict, int] | None, str | None, BaseException | None]:
        """(restored, damage, error) of one try at `step` on this process: what `restore`
        returned; or the damage the files prove; or the error that stops the run, a
        CheckpointError where the files read back whole or cannot be read (judge_failure), a
        CheckpointMismatchError, or Ctrl-C."""
        try:
            return self.restore(abstract_state, step, warn), None, None
        except CheckpointDamagedError as error:
            return None, error.damage, None
        except (CheckpointMismatchError, KeyboardInterrupt) as error:
            return None, None, error
        except Exception as error:  # noqa: BLE001 - judged by the files
            if isinstance(error.__cause__, KeyboardInterrupt):  # orbax wraps Ctrl-C in a read
                return None, None, error.__cause__
            try:
                return None, judge_failure(self.directory / str(step), error), None
            except (CheckpointError, KeyboardInterrupt) as judged:  # a full read: Ctrl-C too
                return None, None, judged

    def _set_aside(self, step: int) -> str:
        """Renames the damaged `step`; its new path. Process 0 renames once every process has
        judged it (agreed_damage), the others waiting (`together`: a failed move stops all). On
        gs:// the rename is a copy, checked, then the deletion of the original, its commit
        markers first (storage.move_folder): stopped half-way, the step is whole or no longer
        saved, its copy whole or gone. Every process then lists afresh (a cached listing would
        keep the step, and that process alone would skip saving it again, a collective)."""
        path = self.directory / str(step)
        moved = f"{path}.corrupt-{int(time.time())}"
        with together("setting a damaged checkpoint aside", (CheckpointError,)):
            if jax.process_index() == 0:
                try:
                    storage.move_folder(path, storage.run_path(moved),
                                        delete_first=(_COMMIT_MARKER,))
                except OSError as error:
                    raise CheckpointError(f"checkpoint {path} is damaged, and moving it aside "
                                          f"to {moved} failed ({error}): move it out of "
                                          "checkpoints/ by hand, then run again") from error
            else:
                moved = f"{path}.corrupt-* (renamed by process 0)"
        storage.forget_listings(self.directory)
        self._manager.reload()
        return moved

    def check_start_from_scratch(self, fresh_start: bool) -> list[str]:
        """Before a run starts at step 0 here (no usable checkpoint): CheckpointError naming the
        damaged steps set aside, if there are any, unless `fresh_start`; the notes to print."""
        names = self.set_aside_folders()
        if names and not fresh_start:
            now = "".join(f"\n{line}" for line in self._set_aside_now)
            raise CheckpointError(
                f"{self.directory} holds no usable checkpoint, only damaged ones set aside: "
                f"{', '.join(names)}{now}\nThe run stops rather than train again from step 0. "
                "Look at them (a good copy put back as checkpoints/<step> resumes from it), run "
                "again with --fresh_start to train from step 0 in this workdir (they stay where "
                "they are), or use a new --workdir.")
        return [f"fresh start: training from step 0; the damaged checkpoints set aside stay in "
                f"{self.directory}: {', '.join(names)}"] if names else []

    # ----- lifetime ---------------------------------------------------------------------

    def wait(self) -> None:
        """Blocks until every started save is complete on disk."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Waits for pending saves and releases the manager's threads."""
        self._manager.close()

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _checkpoints_folder(workdir: str | os.PathLike) -> epath.Path:
    directory = storage.run_path(workdir)
    return directory / "checkpoints" if (directory / "checkpoints").is_dir() else directory


def _reader(directory: epath.Path, state_handler=None) -> ocp.CheckpointManager:
    """A manager that lists `directory` and runs no barrier (orbax's at its creation is a
    collective; its restore's too: read through `state_handler` instead): every process reads
    by itself, so a task that reads another run's weights runs no collective (trainer.py reads
    in `together` blocks). Nothing is created or written."""
    return ocp.CheckpointManager(
        directory, options=ocp.CheckpointManagerOptions(create=False, save_root_metadata=False),
        item_names=(STATE, DATA), item_handlers={
            STATE: state_handler or ocp.StandardCheckpointHandler(),
            DATA: ocp.JsonCheckpointHandler()})


def checkpoint_steps(workdir: str | os.PathLike) -> list[int]:
    """The saved steps of a run's workdir (or its checkpoints/ folder), oldest first; [] when
    there are none. Reads the folder's listing only."""
    directory = _checkpoints_folder(workdir)
    if not directory.is_dir():
        return []
    with _reader(directory) as manager:
        return sorted(manager.all_steps())


def load_state(workdir: str | os.PathLike, step: int | None = None) -> dict:
    """The whole train state of a run's checkpoint (default the latest) as saved, as host NumPy
    arrays: a dict of 'step', 'params', 'opt_state' (the optimizer's state as nested dicts and
    lists, e.g. Adam's {'count', 'mu', 'nu'}), 'rng', and 'ema_params' where the run kept a
    moving average of its weights (train.ema_decay > 0). `workdir` is a run's workdir (with
    checkpoints/) or its checkpoints/ folder. No model or shardings are needed: this is how
    fine-tuning and analysis start from a pretraining run, whatever devices wrote it. (The saved
    arrays' shardings name the mesh of the run that wrote them, a pod slice's say; orbax
    restores to them unless told otherwise and refuses where this process has other devices, so
    the target here is host arrays of the saved shapes.) Nothing in the folder is written or
    cleaned up: a run may still be writing there. Raises CheckpointError naming the folder when
    it holds no readable checkpoint."""
    directory = _checkpoints_folder(workdir)
    reader = ocp.StandardCheckpointHandler()
    with _reader(directory, reader) as manager:
        steps = sorted(manager.all_steps())
        if not steps or (step is not None and step not in steps):
            fix = ("train the run first (python -m train --workdir of this run)" if not steps
                   else f"choose one of the saved steps {steps}")
            raise CheckpointError(f"no checkpoint{'' if step is None else f' of step {step}'} "
                                  f"in {directory}: {fix}{_training_now(directory)}")
        chosen = steps[-1] if step is None else step
        others = (f"; the other saved steps are {[s for s in steps if s != chosen]}"
                  if len(steps) > 1 else "")
        # The cheap check first: orbax's reads of a truncated file fail in its event loop,
        # whose other reads then print tracebacks of their own.
        try:
            damage = find_damage(directory / str(chosen), read_arrays=False)
        except FileNotFoundError:
            damage = "it is gone (removed while it was read)"
        if damage is not None:
            raise CheckpointError(f"checkpoint {directory}/{chosen} is damaged: {damage}{others}"
                                  f"{_training_now(directory)}")
        try:
            saved = manager.item_metadata(chosen)[STATE].tree
            # np.empty reserves address space only: no memory is touched for the target.
            target = jax.tree.map(lambda leaf: np.empty(leaf.shape, leaf.dtype), saved)
            state = reader.restore(directory / str(chosen) / STATE,
                                   args=ocp.args.StandardRestore(target))
        except Exception as error:  # orbax raises many kinds for damaged files
            raise CheckpointError(f"checkpoint {directory}/{chosen} could not be read "
                                  f"({type(error).__name__}: {error}){others}"
                                  f"{_training_now(directory)}") from error
    if not isinstance(state, dict):
        state = {key: getattr(state, key) for key in ("step", "params", "opt_state", "rng",
                                                      "ema_params") if hasattr(state, key)}
    return jax.tree.map(np.asarray, state)


def _training_now(directory: epath.Path) -> str:
    """'; a run is training ...' when one holds the lock of the workdir of `directory` (its
    checkpoints/), whose old steps it prunes while they are read; '' else."""
    holder = training_in(directory.parent if directory.name == "checkpoints" else directory)
    return ("" if holder is None else f"; a run is training in that workdir now ({holder}), "
            "which saves and prunes checkpoints as it goes: read a step it keeps, or wait")


def load_params(workdir: str | os.PathLike, step: int | None = None) -> Any:
    """The parameters of a run's checkpoint (default the latest), as host NumPy arrays
    (`load_state`'s 'params'): how fine-tuning and analysis start from a pretraining run,
    whatever devices wrote it. Raises CheckpointError naming the folder when it holds no
    readable checkpoint."""
    return load_state(workdir, step)["params"]
