"""python -m train.evaluate WORKDIR: a checkpoint's metrics are those the trainer's own eval gave
it (the run's final eval of the last step, and of an earlier step, whose eval the run logged
too), on another split when asked; nothing is written unless --write, which appends a record of
its own kind; --weights ema scores the moving average of the weights a run keeps with
train.ema_decay (its evals' `ema.<name>`); clear errors for a step not saved, a folder that is
not a run's and a run without the average."""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest
from tiny_runs import data_root, train

from train import evaluate as evaluate_cli


@pytest.fixture(scope="module")
def vit_run(tmp_path_factory, fixture_data_root):
    """The smoke ViT trained for 4 steps, evaluated (and checkpointed) at steps 2 and 4."""
    return train(tmp_path_factory.mktemp("vit_run"), "configs/vit/fashion_mnist.py:smoke",
                 fixture_data_root, "--config.train.num_steps=4", "--config.train.eval_every=2",
                 "--config.train.checkpoint_every=2", "--config.optimizer.warmup_steps=1")


def _logged_evals(workdir) -> dict[int, dict]:
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in records if r["split"] == "eval"}


def _files(workdir) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(workdir)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in workdir.rglob("*") if p.is_file()}


def test_metrics_are_the_trainers_eval_of_the_same_checkpoint(vit_run, fixture_data_root,
                                                              capsys):
    logged = _logged_evals(vit_run)
    before = _files(vit_run)
    with data_root(fixture_data_root):
        for step in (None, 2):
            got_step, metrics = evaluate_cli.evaluate(vit_run, step=step, log=print)
            assert got_step == (step or 4)
            assert set(metrics) == {"loss", "accuracy"}
            for name, value in metrics.items():
                assert value == pytest.approx(logged[got_step][name], rel=1e-6, abs=1e-7)
        assert evaluate_cli.main([str(vit_run), "--step", "2"]) == 0
    assert capsys.readouterr().out.startswith(
        f"step 2, split test: accuracy={logged[2]['accuracy']:.4g} loss={logged[2]['loss']:.4g}")
    assert _files(vit_run) == before  # nothing written without --write


def test_another_split_and_write(vit_run, fixture_data_root, capsys):
    with data_root(fixture_data_root):
        _, train_metrics = evaluate_cli.evaluate(vit_run, split="train[:300]")
        assert train_metrics != evaluate_cli.evaluate(vit_run)[1]
        assert evaluate_cli.main([str(vit_run), "--split", "train[:300]", "--write"]) == 0
    records = [json.loads(line) for line in
               (vit_run / "metrics.jsonl").read_text().splitlines()]
    written = records[-1]
    assert (written["step"], written["split"], written["eval_split"]) == (4, "evaluate",
                                                                          "train[:300]")
    assert {k: written[k] for k in train_metrics} == pytest.approx(train_metrics, rel=1e-6)
    assert sum(r["split"] == "evaluate" for r in records) == 1
    assert "step 4, split train[:300]:" in capsys.readouterr().out


def test_errors_name_the_problem(vit_run, tmp_path, fixture_data_root, capsys):
    with data_root(fixture_data_root):
        assert evaluate_cli.main([str(vit_run), "--step", "3"]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint of step 3 in" in err and "(saved steps: [2, 4])" in err
    assert evaluate_cli.main([str(tmp_path)]) == 2
    assert "holds no run (requested_config.json is missing)" in capsys.readouterr().err
    with data_root(fixture_data_root):
        assert evaluate_cli.main([str(vit_run), "--weights", "ema"]) == 2
    assert "hold no moving average of the weights: the run trained with train.ema_decay=0" in \
        capsys.readouterr().err


def test_a_text_run_without_its_vocabulary_is_refused(brown_data_root, tmp_path, capsys):
    """A text run's checkpoints go with the vocabulary it kept in its workdir: without it the
    cached one (which may have other ids) is not used in its place, as train.predict refuses."""
    run = train(tmp_path / "bert", "configs/bert/pretrain.py:smoke", brown_data_root,
                "--config.data.names=('brown',)", "--config.train.num_steps=2",
                "--config.train.eval_every=0", "--config.optimizer.warmup_steps=1")
    with data_root(brown_data_root):
        assert evaluate_cli.main([str(run)]) == 0
        shutil.rmtree(run / "vocabulary")
        assert evaluate_cli.main([str(run)]) == 2
    assert (f"error: {run} holds no vocabulary/ (a run keeps the one its checkpoints were "
            "trained with there") in capsys.readouterr().err


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory, fixture_data_root):
    """The smoke ViT with a moving average of its weights (decay 0.5: far from the raw ones
    after 4 steps), evaluated at the end."""
    return train(tmp_path_factory.mktemp("ema_run"), "configs/vit/fashion_mnist.py:smoke",
                 fixture_data_root, "--config.train.num_steps=4", "--config.train.eval_every=0",
                 "--config.train.checkpoint_every=4", "--config.optimizer.warmup_steps=1",
                 "--config.train.ema_decay=0.5")


def test_the_moving_average_is_scored_as_the_run_scored_it(ema_run, fixture_data_root, capsys):
    from train.predict import load_run

    final = _logged_evals(ema_run)[4]
    with data_root(fixture_data_root):
        _, raw = evaluate_cli.evaluate(ema_run)
        _, averaged = evaluate_cli.evaluate(ema_run, weights="ema")
        assert evaluate_cli.main([str(ema_run), "--weights", "ema", "--write"]) == 0
    for name in ("loss", "accuracy"):
        assert raw[name] == pytest.approx(final[name], rel=1e-6, abs=1e-7)
        assert averaged[name] == pytest.approx(final[f"ema.{name}"], rel=1e-6, abs=1e-7)
    assert averaged["loss"] != pytest.approx(raw["loss"], rel=1e-6)
    written = json.loads((ema_run / "metrics.jsonl").read_text().splitlines()[-1])
    assert written["weights"] == "ema" and written["loss"] == pytest.approx(averaged["loss"])
    # python -m train.predict reads the same two sets of weights.
    raw_run, ema = load_run(ema_run), load_run(ema_run, "ema")
    leaves = [(a, b) for a, b in zip(*(jax.tree.leaves(r.params) for r in (raw_run, ema)))]
    assert len(leaves) > 1 and any(not np.array_equal(a, b) for a, b in leaves)


def test_a_run_from_before_keys_were_added_is_scored_as_it_ran(vit_run, tmp_path,
                                                               fixture_data_root):
    """A workdir written before configs gained keys (train/workdir.py ADDED_KEYS: the moving
    average, DeiT's recipe, init and resize) is rebuilt with the values those runs had, and
    scores what the run scored; a key is added only to the tasks whose configs declare it."""
    import shutil

    from train.workdir import ADDED_KEYS, completed_request

    old = tmp_path / "old"
    shutil.copytree(vit_run, old)
    request = json.loads((old / "requested_config.json").read_text())
    removed = []
    for key in ADDED_KEYS:
        *sections, name = key.split(".")
        section = request
        for part in sections:
            section = section.get(part, {})
        if name in section:
            del section[name]
            removed.append(key)
    assert {"train.ema_decay", "data.repeated_augment", "init"} <= set(removed)
    (old / "requested_config.json").write_text(json.dumps(request))
    with data_root(fixture_data_root):
        assert evaluate_cli.evaluate(old)[1] == evaluate_cli.evaluate(vit_run)[1]
    translate = {"task": {"name": "translate"}, "model": {}, "data": {}, "train": {}}
    completed = completed_request(translate)
    assert completed["train"]["ema_decay"] == 0.0 and completed["model"]["mlp_dropout_rate"] is None
    assert "repeated_augment" not in completed["data"] and translate["train"] == {}


def test_a_run_with_a_train_key_removed_since_is_scored(vit_run, tmp_path, fixture_data_root):
    """Runs made before a train.* key was removed (e.g. train.inject_nan_at_step) still hold it
    in requested_config.json: rebuilding the trainer to score them does not refuse the key, as a
    new start would."""
    import shutil

    from train.run_config import REQUESTED_FILE

    old = tmp_path / "old"
    shutil.copytree(vit_run, old)
    request = json.loads((old / REQUESTED_FILE).read_text())
    request["train"]["inject_nan_at_step"] = -1
    (old / REQUESTED_FILE).write_text(json.dumps(request))
    with data_root(fixture_data_root):
        assert evaluate_cli.evaluate(old)[1] == pytest.approx(evaluate_cli.evaluate(vit_run)[1])
