"""The command line a newcomer meets: --help, reusing a workdir, an interrupt before the first
train step."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

import configs
from train.__main__ import main, parse_args
from train.config import ConfigError, apply_override, describe_configs, load_config_file, to_json
from train.workdir import LISTED, check_workdir, keeps_train_state


def test_help_lists_every_experiment_config_with_its_summary_and_variants(capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    root = Path(configs.__path__[0])
    experiments = sorted(p for p in root.rglob("*.py") if "\ndef get_config(" in p.read_text())
    assert len(experiments) >= 4
    for path in experiments:
        assert f"\n  {path.relative_to(Path.cwd())}\n" in out
    assert "ablations" not in out.split("experiment configs")[1].split("python -m train.sweep")[1]
    assert ("      A small ViT trained from scratch on Fashion-MNIST (28x28 grey images, 10 classes)"
            in out)
    assert ("variants: posemb=learned_1d, posemb_mode=stem, size=custom, init=scratch, "
            "image_size=0, plain, probe, labels=1.0, val, smoke") in " ".join(out.split())


def test_the_config_list_is_read_from_the_files(tmp_path):
    """A new config file shows up as it is written (its docstring's sentence, its parse_arg
    names and defaults, module constants read as their values, unpacked ones too); a sweep
    file, a helper and a file that does not parse do not hide it."""
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "mlp.py").write_text('''"""python -m train --config configs/new/mlp.py --workdir w

An MLP on the digits. It is tiny.

Variants: ...
"""
from configs import common

DEFAULT_ACT = "relu"
WIDTH, DEPTH = 64, 2

def get_config(arg=None):
    args = common.parse_arg(arg, width=WIDTH, act=DEFAULT_ACT, depth=DEPTH, smoke=False)
''')
    (tmp_path / "sweep.py").write_text('"""A sweep."""\ndef get_sweep(arg=None):\n    pass\n')
    (tmp_path / "helper.py").write_text('"""Rows."""\ndef apply_row(config, row):\n    pass\n')
    (tmp_path / "broken.py").write_text("def get_config(:\n")
    text = describe_configs(tmp_path, tmp_path)
    assert ("  new/mlp.py\n      An MLP on the digits.\n"
            "      variants: width=64, act=relu, depth=2, smoke") in text
    assert "sweep.py" not in text and "helper.py" not in text
    assert "  broken.py\n      (cannot be read: " in text


def _saved_run(workdir: Path, spec: str, checkpoint: bool = True) -> Path:
    """A workdir as a run of `spec` leaves it: its config.json and (a stand-in for) a step folder."""
    workdir.mkdir()
    (workdir / "config.json").write_text(to_json(load_config_file(spec)))
    if checkpoint:
        (workdir / "checkpoints" / "20").mkdir(parents=True)
    return workdir


def _smoke(spec: str = "configs/vit/fashion_mnist.py:smoke", **overrides):
    config = load_config_file(spec)
    for key, value in overrides.items():
        apply_override(config, key, value)
    return config


def _value(config, key: str):
    return functools.reduce(lambda node, part: node[part], key.split("."), config)


def _refusal(workdir: Path, spec: str, **overrides) -> str:
    config = _smoke(spec, **overrides)
    with pytest.raises(ConfigError) as error:
        check_workdir(workdir, to_json(config), allow_change=False)
    return str(error.value)


def test_another_task_in_a_used_workdir_asks_for_a_new_workdir_in_a_few_lines(tmp_path):
    """Translation in a ViT's workdir: 49 keys differ. The refusal lists the ones that decide the
    train state first, counts the rest, and does not recommend --allow_config_change (which
    would fail with 'holds another train state')."""
    workdir = _saved_run(tmp_path / "vit", "configs/vit/fashion_mnist.py:smoke")
    message = _refusal(workdir, "configs/transformer/translate.py:smoke")
    lines = message.splitlines()
    assert len(lines) <= LISTED + 3
    assert lines[0] == (f"workdir {workdir} holds another experiment: its checkpoints hold a train "
                        "state (model, optimizer) that this config does not build. It differs in:")
    listed = [line.split(":")[0].strip() for line in lines[1:LISTED + 1]]
    assert {"task.name", "model.name"} <= set(listed)
    assert not any(keeps_train_state(key, None, None) for key in listed)  # those first
    assert lines[LISTED + 1].startswith("  and ") and "more (the workdir's config is" in message
    assert lines[-1] == f"Use a new --workdir for this config (or remove {workdir} to start over in it)."
    assert "--allow_config_change" not in message


@pytest.mark.parametrize("key, value", [("model.hidden_size", "64"), ("optimizer.name", "adam"),
                                        ("optimizer.clip_norm", "0.0"), ("model.posemb", "none")])
def test_a_change_of_the_train_state_asks_for_a_new_workdir(tmp_path, key, value):
    workdir = _saved_run(tmp_path / "vit", "configs/vit/fashion_mnist.py:smoke")
    overrides = {key: value, "train.num_steps": "40"}
    if key == "optimizer.name":
        overrides["optimizer.weight_decay"] = "0.0"
    message = _refusal(workdir, "configs/vit/fashion_mnist.py:smoke", **overrides)
    assert message.splitlines()[1].startswith(f"  {key}: ")  # the key that matters comes first
    assert "  train.num_steps: 20 in the workdir, 40 now" in message
    assert "Use a new --workdir" in message and "--allow_config_change" not in message


def test_a_change_that_keeps_the_train_state_recommends_allow_config_change(tmp_path):
    workdir = _saved_run(tmp_path / "vit", "configs/vit/fashion_mnist.py:smoke")
    changes = {"train.num_steps": "40", "optimizer.learning_rate": "0.002",
               "optimizer.clip_norm": "0.5", "train.eval_every": "20", "data.batch_size": "64"}
    message = _refusal(workdir, "configs/vit/fashion_mnist.py:smoke", **changes)
    assert message.splitlines()[0] == f"workdir {workdir} holds a run with another config:"
    assert "  optimizer.clip_norm: 1.0 in the workdir, 0.5 now" in message
    assert "pass --allow_config_change to resume that run with the new values" in message
    assert "holds another experiment" not in message


def test_another_experiment_in_a_workdir_without_checkpoints_may_start_there(tmp_path):
    workdir = _saved_run(tmp_path / "vit", "configs/vit/fashion_mnist.py:smoke", checkpoint=False)
    message = _refusal(workdir, "configs/vit/fashion_mnist.py:smoke", **{"model.num_layers": "3"})
    assert "which saved no checkpoint" in message
    assert "or pass --allow_config_change to start it in this one" in message


@pytest.mark.parametrize("key, value", [
    ("model.hidden_size", "64"), ("model.posemb", "sincos_2d"), ("model.pool", "cls"),
    ("model.norm", "rmsnorm"), ("model.scan_layers", "True"), ("optimizer.clip_norm", "0.0"),
    ("optimizer.name", "adam"),
    ("optimizer.clip_norm", "0.5"), ("optimizer.learning_rate", "0.01"),
    ("optimizer.schedule", "linear"), ("optimizer.b2", "0.9"), ("model.dropout_rate", "0.1"),
    ("model.remat", "full"), ("model.dtype", "bfloat16"), ("train.num_steps", "40"),
    ("train.grad_accum_steps", "2"), ("data.batch_size", "64"), ("seed", "1"),
    ("data.normalize", "minus_one_to_one"), ("data.eval_resize", "resize"),
    ("train.average_checkpoints", "2"),
])
def test_the_resumable_keys_are_those_that_keep_the_train_state(fashion_mnist_env, tmp_path, key,
                                                                 value):
    """keeps_train_state against the trainer itself: the abstract train state (structure, shapes
    and dtypes) a changed ViT config builds is the saved one's exactly when the key is called
    resumable."""
    import jax

    from train.trainer import Trainer

    saved = _smoke()
    changed = _smoke(**{key: value}, **({"optimizer.weight_decay": "0.0"}
                                          if key == "optimizer.name" else {}))

    def state_of(config):
        state = Trainer(config, tmp_path / "w").abstract_state
        return jax.tree.structure(state), [(x.shape, x.dtype) for x in jax.tree.leaves(state)]

    resumable = keeps_train_state(key, _value(saved, key), _value(changed, key))
    assert resumable == (state_of(saved) == state_of(changed))


def _interrupt_at_start(workdir: Path, sig: int, *overrides: str) -> tuple[int, list[str]]:
    """Starts `python -m train` on the ViT smoke config, sends `sig` as soon as it prints the
    start-up line that precedes the first train step (it then traces and compiles that step for
    a second or more), and returns the exit status and the stderr lines after that line."""
    command = [sys.executable, "-m", "train", "--config", "configs/vit/fashion_mnist.py:smoke",
               "--workdir", str(workdir), *overrides]
    process = subprocess.Popen(command, cwd=REPO, env=dict(os.environ, JAX_PLATFORMS="cpu"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    before = []
    for line in process.stderr:
        before.append(line)
        if " parameters; mesh " in line:
            process.send_signal(sig)
            break
    else:
        pytest.fail(f"no start-up line: {''.join(before)[-3000:]}")
    _, after = process.communicate(timeout=300)
    return process.returncode, after.splitlines()


def test_a_signal_whose_exception_python_discarded_still_stops_the_run():
    """A handler run inside a garbage-collection callback or a __del__ (as jax's, while it
    compiles) raises where Python discards the exception: the signal stays pending, is not
    reported as an error, and the trainer's hand-over (Preemption.arm) raises it before it
    takes over. Other discarded exceptions are still reported."""
    from train.__main__ import Interrupted, _Signals
    from train.preemption import Preemption

    signals = _Signals()
    reported = []
    signals.previous_hook = reported.append

    class Collected:
        def __init__(self, action):
            self.action = action

        def __del__(self):
            self.action()

    def fail():
        raise ValueError("a real error")

    previous, hook = signal.signal(signal.SIGTERM, signals), sys.unraisablehook
    sys.unraisablehook = signals.quiet_discarded
    try:
        Collected(lambda: signals(signal.SIGTERM, None))  # Python discards what it raises
        assert signals.pending == signal.SIGTERM and reported == []
        Collected(fail)
        assert [type(r.exc_value) for r in reported] == [ValueError]
        preemption = Preemption()
        with pytest.raises(Interrupted, match="SIGTERM"):
            preemption.arm()
        assert not preemption.took_over and signal.getsignal(signal.SIGTERM) is signals
    finally:
        sys.unraisablehook = hook
        signal.signal(signal.SIGTERM, previous)


def test_ctrl_c_before_the_first_step_ends_with_one_line_and_130(fashion_mnist_env, tmp_path):
    """No traceback, no checkpoint of a step nobody asked for, no empty checkpoints/ folder."""
    code, lines = _interrupt_at_start(tmp_path / "w", signal.SIGINT)
    assert (code, lines) == (130, [
        "interrupted by SIGINT before the first train step: no checkpoint was written (those "
        "already in the workdir are kept); the same command starts again"])
    assert not (tmp_path / "w" / "checkpoints").exists()


def test_sigterm_before_a_resumed_runs_first_step_leaves_its_checkpoints(fashion_mnist_env,
                                                                         tmp_path):
    workdir = tmp_path / "w"
    assert main(["--config", "configs/vit/fashion_mnist.py:smoke", "--workdir", str(workdir),
                 "--config.train.num_steps=10", "--allow_config_change"]) == 0
    saved = {p.relative_to(workdir): p.stat().st_mtime_ns
             for p in (workdir / "checkpoints").rglob("*")}
    code, lines = _interrupt_at_start(workdir, signal.SIGTERM, "--config.train.num_steps=20",
                                      "--allow_config_change")
    assert code == 128 + signal.SIGTERM and len(lines) == 1, lines
    assert lines[0].startswith("interrupted by SIGTERM before the first train step")
    assert {p.relative_to(workdir): p.stat().st_mtime_ns
            for p in (workdir / "checkpoints").rglob("*")} == saved


def _signal_at(monkeypatch, sig: int, step: int):
    """Sends `sig` to this process right after the train record of `step` is written: after
    the loop has read the signals for that step."""
    from train.metrics_writer import MetricsWriter

    write = MetricsWriter.write

    def write_then_signal(self, at, split, metrics):
        write(self, at, split, metrics)
        if (at, split) == (step, "train"):
            os.kill(os.getpid(), sig)

    monkeypatch.setattr(MetricsWriter, "write", write_then_signal)


def test_a_signal_while_a_step_is_logged_saves_the_next_step_and_says_so(
        fashion_mnist_env, tmp_path, monkeypatch, capsys):
    """SIGTERM while step 5 is logged (or evaluated, or saved), between checkpoints (every 10):
    the run trains step 6, saves it and says so. (It said "saved checkpoint at step 5" and saved
    nothing: the resumed run started over from step 0.)"""
    import json

    _signal_at(monkeypatch, signal.SIGTERM, 5)
    workdir = tmp_path / "w"
    assert main(["--config", "configs/vit/fashion_mnist.py:smoke", "--workdir", str(workdir)]) == 0
    assert "received SIGTERM: saved checkpoint at step 6" in capsys.readouterr().err
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["6"]
    record = json.loads((workdir / "record.json").read_text())
    assert record["sessions"][-1]["outcome"] == "stopped by SIGTERM"
    assert record["sessions"][-1]["end_step"] == 6


@pytest.mark.parametrize("first", [None, signal.SIGTERM], ids=["finished", "stopped"])
def test_a_signal_after_training_leaves_the_record_and_says_nothing_false(
        fashion_mnist_env, tmp_path, monkeypatch, capsys, first):
    """Ctrl-C while the command writes the run's record, after the run finished or after a
    SIGTERM had it save the step it reached: every step trained is checkpointed, so the signal
    is ignored, the record written and the exit status that of the run. (It raised the
    before-the-first-step interrupt: exit 130, "no checkpoint was written", no record.)"""
    import json

    from train import run_record

    write_record = run_record.write_train_record

    def record_interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return write_record(*args, **kwargs)

    monkeypatch.setattr(run_record, "write_train_record", record_interrupted)
    if first is not None:
        _signal_at(monkeypatch, first, 5)
    workdir = tmp_path / "w"
    assert main(["--config", "configs/vit/fashion_mnist.py:smoke", "--workdir", str(workdir)]) == 0
    err = capsys.readouterr().err
    assert "interrupted by" not in err
    record = json.loads((workdir / "record.json").read_text())
    if first is None:
        assert record["finished"] and record["sessions"][-1]["end_step"] == 20
    else:
        assert "received SIGTERM: saved checkpoint at step 6" in err
        assert record["sessions"][-1]["outcome"] == "stopped by SIGTERM"
