"""A run with a gs:// workdir, end to end on a Cloud Storage emulator (tests/gcs_emulator.py):
trained straight, killed with SIGKILL between checkpoints and resumed to the same parameters bit
for bit, a damaged checkpoint set aside; every file of the run in the bucket, none on the disk.

Real processes and the real clients (gcsfs, tensorstore's gcs driver, google-cloud-storage):
only the server is an emulator, so this runs offline. Only processes started with the emulator's
environment touch gs:// (the Google clients read it when imported, and this one has imported
them long before): this one reads the bucket through the emulator's JSON API.
"""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from gcs_emulator import BUCKET, Emulator

STEPS = 30
OVERRIDES = [f"--config.train.num_steps={STEPS}", "--config.train.checkpoint_every=3",
             "--config.train.log_every=1", "--config.train.eval_every=0",
             "--config.train.keep_checkpoints=3"]
CONFIG = str(REPO / "configs" / "vit" / "fashion_mnist.py") + ":smoke"


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    emulator = Emulator(tmp_path_factory.mktemp("gcs") / "emulator.log")
    yield emulator
    emulator.stop()


def command(run: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "train", "--config", CONFIG, "--workdir",
            f"gs://{BUCKET}/{run}", *OVERRIDES, *extra]


def environment(gcs: Emulator, data_root: Path) -> dict[str, str]:
    return dict(os.environ, **gcs.env, PAPERS_JAX_DATA=str(data_root), JAX_PLATFORMS="cpu",
                PYTHONPATH=str(REPO))


def train(gcs, data_root, cwd: Path, run: str, *extra: str) -> subprocess.CompletedProcess:
    result = subprocess.run(command(run, *extra), cwd=cwd, env=environment(gcs, data_root),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-5000:]
    return result


def records(gcs: Emulator, run: str) -> list[dict]:
    text = gcs.read(f"{run}/metrics.jsonl").decode()
    return [json.loads(line) for line in text.splitlines()]


def steps_saved(gcs: Emulator, run: str) -> list[int]:
    """The committed checkpoint steps (orbax marks each with commit_success.txt on gs://)."""
    names = gcs.names(f"{run}/checkpoints/")
    return sorted(int(name.split("/")[2]) for name in names
                  if name.count("/") == 3 and name.endswith("/commit_success.txt")
                  and name.split("/")[2].isdigit())


RESTORE = """
import sys
import jax
import numpy as np
from train.checkpointing import Checkpointer

checkpointer = Checkpointer(sys.argv[1], save_every=1, keep=1)
state, _, _ = checkpointer.restore(None, int(sys.argv[2]))
checkpointer.close()
leaves = jax.tree_util.tree_flatten_with_path(jax.device_get(state["params"]))[0]
np.savez(sys.argv[3], **{jax.tree_util.keystr(path): leaf for path, leaf in leaves})
"""


def final_params(gcs, folder: Path, run: str, step: int = STEPS) -> dict[str, np.ndarray]:
    """The parameters of the run's checkpoint `step`, restored by train/checkpointing.py in a
    process of its own, by name."""
    out = folder / f"{run}.npz"
    result = subprocess.run(
        [sys.executable, "-c", RESTORE, f"gs://{BUCKET}/{run}/checkpoints", str(step), str(out)],
        cwd=folder, env=dict(os.environ, **gcs.env, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO)),
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    with np.load(out) as arrays:
        return dict(arrays)


def assert_bit_identical(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def event_steps(gcs: Emulator, run: str, tag: str) -> list[int]:
    """The steps of the scalar `tag` in the run's TensorBoard event files, decoded from their
    TFRecord framing (length, its CRC, the Event proto, its CRC)."""
    from tensorboardX.proto import event_pb2

    steps = []
    for name in gcs.names(f"{run}/tensorboard/"):
        data, offset = gcs.read(name), 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 16 + length
            steps += [event.step for value in event.summary.value if value.tag == tag]
    return sorted(steps)


def assert_nothing_local(folder: Path) -> None:
    """The runs' working directory holds nothing: no `gs:` folder made of a collapsed URL."""
    assert sorted(p.name for p in folder.iterdir()) == [], list(folder.rglob("*"))[:20]


@pytest.fixture(scope="module")
def straight(gcs, fixture_data_root, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("straight_cwd")
    train(gcs, fixture_data_root, cwd, "straight")
    assert_nothing_local(cwd)
    return final_params(gcs, tmp_path_factory.mktemp("params"), "straight")


def test_a_gs_workdir_holds_the_whole_run_and_resumes_after_sigkill_bit_identical(
        gcs, fixture_data_root, straight, tmp_path, tmp_path_factory):
    names = gcs.names("straight/")
    for name in ("config.json", "requested_config.json", "metrics.jsonl", "record.json"):
        assert f"straight/{name}" in names, names
    assert steps_saved(gcs, "straight") == [24, 27, 30]  # keep_checkpoints=3: the rest deleted
    assert not [n for n in names if n.startswith("straight/checkpoints/")
                and n.split("/")[2] not in ("24", "27", "30")], "deleted steps left objects"
    assert event_steps(gcs, "straight", "train/loss") == list(range(1, STEPS + 1))
    assert json.loads(gcs.read("straight/record.json"))["finished"] is True

    kill_at = random.Random().randint(4, STEPS - 6)
    process = subprocess.Popen(command("killed"), cwd=tmp_path,
                               env=environment(gcs, fixture_data_root),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        try:  # past kill_at, with a checkpoint committed: the restart resumes from between two
            logged = max(r["step"] for r in records(gcs, "killed"))
        except (OSError, ValueError):  # not written yet (HTTP 404), or no record yet
            logged = 0
        if logged >= kill_at and steps_saved(gcs, "killed"):
            break
        time.sleep(0.2)
    assert process.poll() is None, f"finished before step {kill_at}: {process.communicate()}"
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL

    resumed = train(gcs, fixture_data_root, tmp_path, "killed")
    assert f"resumed from gs://{BUCKET}/killed/checkpoints at step" in resumed.stderr
    assert_bit_identical(final_params(gcs, tmp_path_factory.mktemp("params"), "killed"), straight)
    assert [r["step"] for r in records(gcs, "killed") if r["split"] == "train"] \
        == list(range(1, STEPS + 1)), f"kill at step {kill_at}"
    assert_nothing_local(tmp_path)


def test_a_damaged_checkpoint_on_gs_is_set_aside_whole_and_the_previous_one_resumed(
        gcs, fixture_data_root, straight, tmp_path, tmp_path_factory):
    train(gcs, fixture_data_root, tmp_path, "damaged")
    step = f"damaged/checkpoints/{STEPS}/"
    files = gcs.names(step)
    victim = next(n for n in files if n.startswith(f"{step}data/process_"))
    gcs.write(victim, b"{cut sho")  # not JSON: proven damage

    again = train(gcs, fixture_data_root, tmp_path, "damaged")
    assert f"cannot be restored: data/{victim.rsplit('/', 1)[1]} is not JSON" in again.stderr
    assert f"at step {STEPS - 3}" in again.stderr
    aside = sorted({n.split("/")[2] for n in gcs.names("damaged/checkpoints/")
                    if ".corrupt-" in n.split("/")[2]})
    assert len(aside) == 1 and aside[0].startswith(f"{STEPS}.corrupt-"), aside
    moved = gcs.names(f"damaged/checkpoints/{aside[0]}/")
    assert [n.replace(aside[0], str(STEPS), 1) for n in moved] == files  # copied whole
    assert_bit_identical(final_params(gcs, tmp_path_factory.mktemp("params"), "damaged"),
                         straight)  # step 30 again, from 27
    assert_nothing_local(tmp_path)
