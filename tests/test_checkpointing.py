"""Checkpointer: round trips, keep-N, save interval, resume, restore onto another mesh, and
multi-host checkpoints with each process's data state."""

import os
import subprocess
import sys
import textwrap

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax.training import train_state
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from train import optimizers
from train.checkpoint_damage import find_damage
from train.checkpointing import (CheckpointDamagedError, Checkpointer,
                                 CheckpointError, CheckpointMismatchError, load_params,
                                 load_state)

from conftest import json_report, run_python, run_two_processes, xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class State(train_state.TrainState):
    rng: jax.Array


def _make_state(seed: int, name: str = "adamw", steps: int = 2) -> State:
    """A tiny Dense model's TrainState after `steps` updates (non-trivial Adam moments)."""
    model = nn.Dense(3)
    cfg = ml_collections.ConfigDict(dict(
        name=name, schedule="linear", learning_rate=1e-2, warmup_steps=1, total_steps=10,
        end_learning_rate=0.0, b1=0.9, b2=0.999, eps=1e-6, momentum=0.0,
        weight_decay=0.01 if name == "adamw" else 0.0, clip_norm=1.0))
    tx, _ = optimizers.make_optimizer(cfg)
    x = jax.random.normal(jax.random.key(seed), (4, 5))

    def init():
        params = model.init(jax.random.key(seed), x)["params"]
        return State.create(apply_fn=model.apply, params=params, tx=tx,
                            rng=jax.random.key(seed + 100))

    state = jax.jit(init)()
    for _ in range(steps):
        grads = jax.grad(lambda p: jnp.sum(model.apply({"params": p}, x) ** 2))(state.params)
        state = state.apply_gradients(grads=grads)
    return state


def _abstract(state, sharding):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                        jax.eval_shape(lambda: state))


def _leaves(state):
    """Leaves as NumPy (typed rng keys as their uint32 key data)."""
    def raw(x):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.asarray(x)
    return [raw(x) for x in jax.tree.leaves(state)]


def _replicated():
    return NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P())


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_round_trip_is_bit_identical(tmp_path, name):
    state = _make_state(0, name)
    data = {"iterator": {"next_index": 1234, "epoch": 2}, "tokens_seen": 10 ** 12}
    with Checkpointer(tmp_path / "ckpt", save_every=1, keep=3) as ckpt:
        assert os.fspath(ckpt.directory) == str(tmp_path / "ckpt") and os.path.isabs(ckpt.directory)
        assert ckpt.save(7, state, data)
        ckpt.wait()
        sharding = _replicated()
        restored, restored_data, step = ckpt.restore(_abstract(state, sharding))
    assert step == 7 and restored_data == data
    assert jax.tree.structure(restored) == jax.tree.structure(state)
    for a, b in zip(_leaves(restored), _leaves(state)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    for leaf in jax.tree.leaves(restored):
        assert leaf.sharding == sharding
    assert jnp.issubdtype(restored.rng.dtype, jax.dtypes.prng_key)  # typed key comes back typed
    assert int(restored.step) == 2
    # The restored rng key and optimizer state are usable.
    jax.random.split(restored.rng)
    restored.apply_gradients(grads=jax.tree.map(jnp.ones_like, restored.params))


def test_restore_casts_to_requested_dtype(tmp_path):
    state = {"w": jnp.linspace(-1, 1, 12, dtype=jnp.float32).reshape(3, 4)}
    with Checkpointer(tmp_path, save_every=1, keep=1) as ckpt:
        ckpt.save(1, state, {})
        target = {"w": jax.ShapeDtypeStruct((3, 4), jnp.bfloat16, sharding=_replicated())}
        restored, _, _ = ckpt.restore(target)
    assert restored["w"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(restored["w"], state["w"].astype(jnp.bfloat16))


def test_a_checkpoint_of_another_state_is_refused_and_left_alone(tmp_path):
    """Another optimizer (adamw's chain holds one more state than adam's, moving the schedule's
    count) or a wider kernel is not damage: restore_latest_good names the differences and
    renames nothing."""
    saved = _make_state(0, "adam")
    with Checkpointer(tmp_path, save_every=1, keep=3) as ckpt:
        ckpt.save(1, saved, {})
        ckpt.save(2, saved, {})
        other = _make_state(0, "adamw")       # adamw: a weight-decay state in the chain
        with pytest.raises(CheckpointMismatchError) as error:
            ckpt.restore_latest_good(_abstract(other, _replicated()))
        message = str(error.value)
        assert f"checkpoint {tmp_path / '2'} holds another train state" in message
        assert "in this run's state only: opt_state/1/2/count" in message
        assert "in the checkpoint only: opt_state/1/1/count" in message
        assert "resume with that config, or train in a new --workdir" in message
        wider = _abstract(saved, _replicated()).replace(params={
            "kernel": jax.ShapeDtypeStruct((5, 4), jnp.float32, sharding=_replicated()),
            "bias": jax.ShapeDtypeStruct((3,), jnp.float32, sharding=_replicated())})
        with pytest.raises(CheckpointMismatchError, match=r"other shape: params/kernel: "
                           r"\(5, 3\) in the checkpoint, \(5, 4\) now"):
            ckpt.restore_latest_good(wider)
        assert sorted(os.listdir(tmp_path)) == ["1", "2"] and ckpt.all_steps() == [1, 2]
        restored, _, step = ckpt.restore_latest_good(_abstract(saved, _replicated()))
    assert step == 2
    for a, b in zip(_leaves(restored), _leaves(saved)):
        np.testing.assert_array_equal(a, b)


def test_async_save_copies_before_returning(tmp_path):
    """The caller may donate (delete) the state right after save() returns."""
    state = _make_state(1)
    expected = _leaves(state)
    with Checkpointer(tmp_path, save_every=1, keep=1, async_save=True) as ckpt:
        abstract = _abstract(state, _replicated())
        assert ckpt.save(1, state, {"i": 1})
        assert ckpt.latest_step() == 1  # listed while still being written
        for leaf in jax.tree.leaves(state):
            leaf.delete()
        restored, _, _ = ckpt.restore(abstract)  # waits for the write
    for a, b in zip(_leaves(restored), expected):
        np.testing.assert_array_equal(a, b)


def test_keep_last_n(tmp_path):
    with Checkpointer(tmp_path, save_every=1, keep=2) as ckpt:
        for step in range(1, 6):
            assert ckpt.save(step, {"x": jnp.full((2,), step)}, {"step": step})
        ckpt.wait()
        assert ckpt.all_steps() == [4, 5]
    assert sorted(int(n) for n in os.listdir(tmp_path) if n.isdigit()) == [4, 5]


def test_save_every_and_force(tmp_path):
    x = {"x": jnp.zeros((2,))}
    with Checkpointer(tmp_path, save_every=3, keep=10, async_save=False) as ckpt:
        assert not ckpt.save(1, x, {})          # not a multiple, even in an empty directory
        assert ckpt.save(3, x, {})
        assert not ckpt.save(4, x, {})
        assert ckpt.save(4, x, {}, force=True)
        assert not ckpt.save(4, x, {}, force=True)  # already saved: nothing to do
        assert ckpt.save(6, x, {})
        assert ckpt.all_steps() == [3, 4, 6]


def test_restore_specific_step_and_resume(tmp_path):
    states = {2: _make_state(2), 4: _make_state(4)}
    with Checkpointer(tmp_path, save_every=2, keep=5) as ckpt:
        for step, state in states.items():
            ckpt.save(step, state, {"at": step})
    # A new Checkpointer on the same directory (a restarted job) sees what is there.
    with Checkpointer(tmp_path, save_every=2, keep=5) as ckpt:
        assert ckpt.latest_step() == 4 and ckpt.all_steps() == [2, 4]
        abstract = _abstract(states[2], _replicated())
        restored, data, step = ckpt.restore(abstract, step=2)
        assert step == 2 and data == {"at": 2}
        for a, b in zip(_leaves(restored), _leaves(states[2])):
            np.testing.assert_array_equal(a, b)
        _, data, step = ckpt.restore(abstract)
        assert step == 4 and data == {"at": 4}
        with pytest.raises(FileNotFoundError, match="step 3"):
            ckpt.restore(abstract, step=3)


def test_a_half_written_step_of_a_killed_run_never_counts_and_is_cleaned_up(tmp_path):
    """Orbax writes a step into `<step>.orbax-checkpoint-tmp-<time>` and renames it when whole: a
    run killed during a save leaves that folder, half written. The restart resumes from the
    last whole step, calls nothing damaged, and removes the half-written folder."""
    import shutil

    states = {2: _make_state(2), 4: _make_state(4)}
    with Checkpointer(tmp_path, save_every=2, keep=5) as ckpt:
        for step, state in states.items():
            ckpt.save(step, state, {"at": step})
    half = tmp_path / "6.orbax-checkpoint-tmp-1790000000"
    shutil.copytree(tmp_path / "4", half)
    largest = max((p for p in half.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    largest.write_bytes(largest.read_bytes()[: largest.stat().st_size // 2])
    (half / "commit_success.txt").unlink(missing_ok=True)
    warnings = []
    with Checkpointer(tmp_path, save_every=2, keep=5) as ckpt:
        assert ckpt.latest_step() == 4 and ckpt.all_steps() == [2, 4]
        _, data, step = ckpt.restore_latest_good(_abstract(states[4], _replicated()),
                                                 warn=warnings.append)
    assert (step, data, warnings) == (4, {"at": 4}, [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2", "4"]


def test_empty_directory(tmp_path):
    with Checkpointer(tmp_path / "new", save_every=1, keep=1) as ckpt:
        assert ckpt.latest_step() is None and ckpt.all_steps() == []
        assert not os.path.exists(tmp_path / "new")  # the first save makes it: a run stopped
                                                     # before one leaves no empty folder
        with pytest.raises(FileNotFoundError, match=str(tmp_path / "new")):
            ckpt.restore({"x": jax.ShapeDtypeStruct((2,), jnp.float32)})
        with pytest.raises(TypeError, match="JSON"):
            ckpt.save(1, {"x": jnp.zeros(2)}, {"bad": object()})
        ckpt.save(2, {"x": jnp.zeros(2)}, {"epoch": 0}, force=True)
        ckpt.wait()
        assert ckpt.all_steps() == [2] and os.listdir(tmp_path / "new") == ["2"]


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="save_every"):
        Checkpointer(tmp_path, save_every=0, keep=1)
    with pytest.raises(ValueError, match="keep"):
        Checkpointer(tmp_path, save_every=1, keep=0)


_RESHARD_SCRIPT = textwrap.dedent("""
    import sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from train.checkpointing import Checkpointer, CheckpointMismatchError

    assert jax.device_count() == 8, jax.devices()
    directory = sys.argv[1]
    mesh8 = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "fsdp"))
    w = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    b = np.arange(16, dtype=np.int32)
    state = {
        "w": jax.device_put(w, NamedSharding(mesh8, P("data", "fsdp"))),
        "b": jax.device_put(b, NamedSharding(mesh8, P("fsdp"))),
        "rng": jax.device_put(jax.random.key(5), NamedSharding(mesh8, P())),
        "step": jax.device_put(jnp.int32(11), NamedSharding(mesh8, P())),
    }
    with Checkpointer(directory, save_every=1, keep=1) as ckpt:
        assert ckpt.save(11, state, {"pos": 3})

    mesh4 = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "fsdp"))
    want = {"w": NamedSharding(mesh4, P("fsdp", None)), "b": NamedSharding(mesh4, P("data")),
            "rng": NamedSharding(mesh4, P()), "step": NamedSharding(mesh4, P())}
    abstract = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=want[k])
                for k, v in state.items()}
    with Checkpointer(directory, save_every=1, keep=1) as ckpt:
        restored, data, step = ckpt.restore(abstract)
    assert step == 11 and data == {"pos": 3}
    for k, v in restored.items():
        assert v.sharding == want[k], (k, v.sharding)
        assert set(v.sharding.device_set) == set(jax.devices()[:4])
    np.testing.assert_array_equal(restored["w"], w)
    assert restored["w"].addressable_shards[0].data.shape == (4, 16)
    np.testing.assert_array_equal(restored["b"], b)
    np.testing.assert_array_equal(jax.random.key_data(restored["rng"]),
                                  jax.random.key_data(jax.random.key(5)))
    assert int(restored["step"]) == 11
    print("RESHARD_OK")
""")


def test_restore_onto_a_different_mesh(tmp_path):
    env = dict(os.environ, XLA_FLAGS=xla_flags(8),
               JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-c", _RESHARD_SCRIPT, str(tmp_path / "ckpt")],
                            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "RESHARD_OK" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]


_SAVE_ON_FOUR_DEVICES = textwrap.dedent("""
    import sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from train.checkpointing import Checkpointer
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("data", "fsdp"))
    kernel = jax.device_put(np.arange(48, dtype=np.float32).reshape(8, 6),
                            NamedSharding(mesh, P("fsdp", None)))
    state = {"params": {"dense": {"kernel": kernel}},
             "step": jax.device_put(jnp.int32(7), NamedSharding(mesh, P()))}
    with Checkpointer(sys.argv[1], save_every=1, keep=1) as checkpointer:
        checkpointer.save(7, state, {"at": 7}, force=True)
""")


def test_load_params_reads_a_checkpoint_that_other_devices_wrote(tmp_path):
    """A run's parameters read as NumPy by a process with other devices than the run had (a
    pod slice's pretraining fine-tuned or exported on one GPU): here written sharded over a
    2 x 2 mesh of 4 devices, read by this 1-device process."""
    run_python(["-c", _SAVE_ON_FOUR_DEVICES, str(tmp_path / "checkpoints")], devices=4)
    assert jax.device_count() != 4
    params = load_params(tmp_path)
    kernel = params["dense"]["kernel"]
    assert isinstance(kernel, np.ndarray)
    np.testing.assert_array_equal(kernel, np.arange(48, dtype=np.float32).reshape(8, 6))


def test_load_state_names_a_damaged_step_and_the_others(tmp_path, caplog):
    """A truncated array file is named before orbax reads it (its failed reads printed
    tracebacks from its event loop), with the other saved steps; the item it does not restore
    (the data state) raises no warning that reads as damage."""
    import logging

    with Checkpointer(tmp_path / "checkpoints", save_every=1, keep=2) as checkpointer:
        for step in (2, 4):
            checkpointer.save(step, {"params": {"w": jnp.full((64, 64), step, jnp.float32)}},
                              {"at": step}, force=True)
    for path in (tmp_path / "checkpoints" / "4" / "state").rglob("d/*"):
        path.write_bytes(path.read_bytes()[:10])
    with caplog.at_level(logging.WARNING), \
            pytest.raises(CheckpointError, match=r"checkpoints/4 is damaged: .*the other saved "
                                                 r"steps are \[2\]"):
        load_state(tmp_path)
    np.testing.assert_array_equal(load_state(tmp_path, 2)["params"]["w"], np.full((64, 64), 2))
    assert not [r for r in caplog.records if "could not be restored" in r.getMessage()]
    with pytest.raises(CheckpointError, match="no checkpoint of step 3 .*choose one of the "
                                              r"saved steps \[2, 4\]$"):
        load_state(tmp_path, 3)
    from train import workdir_lock
    with workdir_lock.hold(tmp_path), pytest.raises(  # its steps may be pruned under a reader
            CheckpointError, match=r"a run is training in that workdir now \(pid \d+ on "):
        load_state(tmp_path, 3)


def test_multi_host_checkpoint_keeps_each_process_data_state(tmp_path):
    """2 processes x 2 devices save one sharded state collectively and each its own data state;
    each gets its own back. One process with 4 devices restores the same arrays and, as its
    process count differs, process 0's data state with a warning saying so. A step that lacks
    one process's data state is damaged for every process: process 0 sets it aside, and both
    fall back to the previous step together."""
    script = "tests/scripts/checkpoint_processes.py"
    directory = str(tmp_path / "ckpt")
    run_two_processes([script, "save", directory])
    assert sorted(os.listdir(tmp_path / "ckpt" / "3" / "data")) == [
        "commit_success.txt", "process_0-of-2.json", "process_1-of-2.json"]
    assert find_damage(tmp_path / "ckpt" / "3") is None  # each process's OCDBT files
    want = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    for index, (stdout, _) in enumerate(run_two_processes([script, "restore", directory])):
        report = json_report(stdout)
        assert report["process"] == index and report["step"] == 3
        assert report["data"] == {"process": index, "next_index": 100 + index, "step": 3}
        assert report["mesh_size"] == 4 and report["warnings"] == []
        np.testing.assert_array_equal(report["w"], want)
    report = json_report(run_python([script, "restore", directory], devices=4).stdout)
    assert report["data"] == {"process": 0, "next_index": 100, "step": 3}
    np.testing.assert_array_equal(report["w"], want)
    assert len(report["warnings"]) == 1
    assert "saved by 2 process(es) and this run has 1" in report["warnings"][0]
    (tmp_path / "ckpt" / "3" / "data" / "process_1-of-2.json").unlink()
    for index, (stdout, _) in enumerate(run_two_processes([script, "restore", directory])):
        report = json_report(stdout)
        assert report["step"] == 2 and report["data"]["process"] == index
        np.testing.assert_array_equal(report["w"], want - 1)
        warning, = report["warnings"]
        assert "data/ lacks process_1-of-2.json beside the other files of its 2 processes" in (
            warning)
    assert sorted(p.name.split(".")[0] for p in (tmp_path / "ckpt").iterdir()) == ["2", "3"]
    assert len(list((tmp_path / "ckpt").glob("3.corrupt-*"))) == 1


def test_checkpoints_with_one_data_file_for_all_processes_still_restore(tmp_path):
    """Checkpoints written before the data state was kept per process hold one 'metadata' JSON
    in the data item; it is read for every process."""
    sharding = _replicated()
    state = {"w": jax.device_put(jnp.ones((2, 3)), sharding)}
    with Checkpointer(tmp_path, save_every=1, keep=1) as ckpt:
        ckpt.save(1, state, {"at": 1})
    data_dir = tmp_path / "1" / "data"
    (data_dir / "process_0-of-1.json").rename(data_dir / "metadata")
    with Checkpointer(tmp_path, save_every=1, keep=1) as ckpt:
        _, data, step = ckpt.restore(_abstract(state, sharding))
    assert step == 1 and data == {"at": 1}
    (data_dir / "metadata").unlink()
    with Checkpointer(tmp_path, save_every=1, keep=1) as ckpt:
        with pytest.raises(CheckpointDamagedError, match="data/ holds no data-state file"):
            ckpt.restore(_abstract(state, sharding))
