"""train/recipe_runs.py and benchmarks/gpu_recipes.py: the recipes' real models on one GPU on
mock data. Each run is its recipe's phase at one GPU's share of the batch (the FLOPs of the
recipe's model, computed here apart); the launch page's table computes the step, the MFU against
the device's data-sheet peak and the projected time from a record; the runner starts each run in
a fresh workdir, goes on after a failure and copies the records; the records pass `records
save` under their names."""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys

import pytest
from conftest import REPO

from benchmarks import gpu_recipes
from models.bert import BertConfig
from train import flops, recipe_costs as rc, recipe_runs as rr, records
from train.config import load_config_file, to_dataclass
from train.headline_runs import RUNS as HEADLINE


def _run(name: str) -> rr.RecipeRun:
    return next(run for run in rr.RUNS if run.name == name)


def test_each_run_is_its_recipes_phase_at_one_gpus_batch():
    """Every phase of every recipe has a run; a run's config (its overrides applied) is the
    recipe's model with one phase of the global batch / 8, BERT's at 128 tokens with 20
    predictions and 512 with 80, each example costing what the recipe's phase does."""
    assert [run.name for run in rr.RUNS] == [
        "gpu_recipe_bert_base_128", "gpu_recipe_bert_base_512", "gpu_recipe_bert_large_128",
        "gpu_recipe_bert_large_512", "gpu_recipe_vit_b16", "gpu_recipe_vit_b16_384",
        "gpu_recipe_transformer_base", "gpu_recipe_transformer_big"]
    for run in rr.RUNS:
        config = run.resolved_config()
        (phase,) = rc.phases(config)
        recipe = rc.phases(load_config_file(run.recipe.config))[run.phase]
        assert phase.batch * 8 == recipe.batch, run.name
        assert phase.flops_per_example == pytest.approx(recipe.flops_per_example), run.name
        assert config.model.dtype == "bfloat16" and config.train.num_steps == rr.STEPS
        assert run.command.startswith(f"python {rr.RUNNER} ")
    large = _run("gpu_recipe_bert_large_512").resolved_config()
    assert (large.data.max_seq_length, large.data.max_predictions, large.data.batch_size) == (
        512, 80, 32)
    cfg = to_dataclass(BertConfig, _model_section(large), "model", vocab_size=30522)
    assert cfg.hidden_size == 1024 and cfg.num_layers == 24
    assert rc.phases(large)[0].flops_per_example == flops.bert_train_flops_per_example(
        cfg, 512, 80)
    finetune, scratch = _run("gpu_recipe_vit_b16_384"), _run("gpu_recipe_vit_b16")
    assert f"init={scratch.workdir}" in finetune.config
    assert rr.RUNS.index(scratch) < rr.RUNS.index(finetune)


def _model_section(config):
    section = config.model.copy_and_resolve_references()
    with section.unlocked():
        del section["name"]
    return section


def _record(name: str, steps_per_second: float, device_kind: str = "NVIDIA H200",
            devices: int = 1, peak_gib: float = 20.0, waiting: float = 0.02,
            vocab_size: int | None = None, command: list[str] | None = None) -> dict:
    """A record of run `name` as it would be made: its command, its resolved config (with the
    vocabulary it trained, where given), the last window's rates, the machine."""
    run = _run(name)
    config = run.resolved_config()
    if vocab_size is not None:
        config.data.vocab_size = vocab_size
    return {"command": command or shlex.split(run.command), "config": config.to_dict(),
            "metrics": {"train": {"steps_per_second": steps_per_second,
                                  "input_wait_fraction": waiting}},
            "machine": {"device_kind": device_kind, "device_count": devices,
                        "device_memory": [{"peak_bytes_in_use": peak_gib * 2**30}]}}


class _Records:
    def __init__(self, **records):
        self.records = records

    def get(self, name):
        return self.records.get(name)


def _rows(table: str) -> dict[str, list[str]]:
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in table.splitlines()[2:]]
    return {cells[2].split("`")[1]: cells for cells in rows}


def test_the_table_computes_step_mfu_and_time_from_the_records():
    """BERT-base at 5 steps/s (seq 128) and 2 (seq 512) on an H200: steps of 200 and 500 ms,
    MFU = one GPU's FLOPs per step (of the model as it ran: the 512-token run's record has a
    28,000-token vocabulary) x steps/s / 989 TFLOP/s, each phase's recipe steps at that step,
    the recipe's total on its last row; unrecorded runs say so; a record without a data-sheet
    peak, of several devices, or of another command (extra overrides) is refused."""
    table = rr.table(_Records(
        gpu_recipe_bert_base_128=_record("gpu_recipe_bert_base_128", 5.0),
        gpu_recipe_bert_base_512=_record("gpu_recipe_bert_base_512", 2.0, peak_gib=30.5,
                                         waiting=0.614, vocab_size=28_000)))
    rows = _rows(table)
    config = load_config_file("configs/bert/pretrain.py:size=base,data=wikipedia")
    per_gpu = [128 * flops.bert_train_flops_per_example(
                   to_dataclass(BertConfig, _model_section(config), "model", vocab_size=30522),
                   128, 20),
               32 * flops.bert_train_flops_per_example(
                   to_dataclass(BertConfig, _model_section(config), "model", vocab_size=28_000),
                   512, 80)]
    first, second = rows["gpu_recipe_bert_base_128"], rows["gpu_recipe_bert_base_512"]
    assert first[1] == "128 x 128 tokens" and second[1] == "32 x 512 tokens"
    assert first[3:8] == ["NVIDIA H200", "200 ms", f"{per_gpu[0] * 5 / 989e12:.1%}", "2%",
                          "20.0 GiB"]
    assert second[3:8] == ["NVIDIA H200", "500 ms", f"{per_gpu[1] * 2 / 989e12:.1%}", "61%",
                           "30.5 GiB"]
    assert first[8] == f"900,000 x 200 ms = {rc.duration(900_000 * 0.2)}"
    assert first[9] == "-"  # the recipe's total waits for its last phase
    assert second[9] == rc.duration(900_000 * 0.2 + 100_000 * 0.5)
    assert "not recorded yet" in rows["gpu_recipe_vit_b16"][2]
    alone = _rows(rr.table(_Records(
        gpu_recipe_bert_base_512=_record("gpu_recipe_bert_base_512", 2.0))))
    assert alone["gpu_recipe_bert_base_512"][9] == "-"  # phase 1 unrecorded: no total
    vit = "gpu_recipe_vit_b16"
    with pytest.raises(ValueError, match="'cpu', which has no data-sheet bf16 peak"):
        rr.table(_Records(gpu_recipe_vit_b16=_record(vit, 1.0, device_kind="cpu")))
    with pytest.raises(ValueError, match="ran on 2 devices"):
        rr.table(_Records(gpu_recipe_vit_b16=_record(vit, 1.0, devices=2)))
    smaller = [*shlex.split(_run(vit).command), "--config.data.batch_size=2"]
    with pytest.raises(ValueError, match="made by another command than the run's"):
        rr.table(_Records(gpu_recipe_vit_b16=_record(vit, 1.0, command=smaller)))


def _stand_in(tmp_path) -> str:
    """A `python` that behaves as tests/scripts/recipe_run.py does, exiting 0 whatever the
    run did: it appends its argv and environment's PAPERS_JAX_DATA / CUDA_VISIBLE_DEVICES to
    calls.jsonl, writes a finished record.json into its --workdir, but no record for
    BERT-large at 128 tokens and an unfinished one (a stopped run) at 512."""
    script = tmp_path / "python"
    script.write_text(f"""#!{sys.executable}
import json, os, pathlib, sys
with open({str(tmp_path / "calls.jsonl")!r}, "a") as f:
    env = [os.environ.get("PAPERS_JAX_DATA"), os.environ.get("CUDA_VISIBLE_DEVICES")]
    f.write(json.dumps([sys.argv[1:], env]) + "\\n")
workdir = pathlib.Path(sys.argv[sys.argv.index("--workdir") + 1])
if "bert_large_128" not in str(workdir):
    workdir.mkdir(parents=True, exist_ok=True)
    finished = "bert_large_512" not in str(workdir)
    (workdir / "record.json").write_text(json.dumps({{"finished": finished}}))
print(json.dumps({{"code": 0}}))
""")
    script.chmod(0o755)
    return str(script)


def test_the_runner_starts_fresh_goes_on_after_a_failure_and_copies_the_records(tmp_path,
                                                                                  monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path / "real_runs_data"))
    python = _stand_in(tmp_path)
    stale = tmp_path / _run("gpu_recipe_bert_base_128").workdir / "stale"
    stale.parent.mkdir(parents=True)
    stale.write_text("from an earlier measurement")
    failed = gpu_recipes.run_all([], str(tmp_path / "records"), False, ["--config.x=1"],
                                 python=python, root=tmp_path)
    assert failed == ["gpu_recipe_bert_large_128", "gpu_recipe_bert_large_512"]
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [argv[argv.index("--workdir") + 1] for argv, _ in calls] == [
        run.workdir for run in rr.RUNS]
    assert all(argv[0] == rr.RUNNER and argv[-1] == "--config.x=1" for argv, _ in calls)
    # The mock vocabularies go to a cache of their own, and each run sees one GPU.
    assert all(env == [str(tmp_path / rr.WORKDIRS / "data"), "0"] for _, env in calls)
    assert not stale.exists()
    copied = sorted(p.parent.name for p in (tmp_path / "records").glob("*/record.json"))
    assert copied == sorted(run.name for run in rr.RUNS if "large" not in run.name)
    assert gpu_recipes.main(["--runs", "gpu_recipe_vit_b16", "--dry_run"]) == 0


def test_the_runner_refuses_an_unknown_run(capsys):
    with pytest.raises(SystemExit) as stop:
        gpu_recipes.main(["--runs", "gpu_recipe_vit_b32"])
    assert stop.value.code == 2
    assert "invalid choice: 'gpu_recipe_vit_b32'" in capsys.readouterr().err


def test_a_runs_record_is_saved_under_its_name():
    """The command a run's record names (tests/scripts/recipe_run.py's `command`: mocked data,
    not `python -m train`; tests/test_recipes.py checks a record holds it) is what `records
    save` checks against the headline run of that name; another run's name does not match."""
    recipe_run = _recipe_run_script()
    run = _run("gpu_recipe_bert_base_512")
    assert HEADLINE[run.name].command == run.command
    argv = shlex.split(run.command)
    assert argv[:3] == ["python", rr.RUNNER, str(run.mock_examples)]
    assert "--config.data.train_split=train[:-256]" in argv  # quoted in the command
    recorded = recipe_run.command(int(argv[2]), argv[3:])  # as the runner's process gets them
    assert recorded == argv
    assert records.essential(recorded) == records.essential(HEADLINE[run.name].argv)
    other = _run("gpu_recipe_bert_base_128")
    assert records.essential(recorded) != records.essential(HEADLINE[other.name].argv)


def _recipe_run_script():
    spec = importlib.util.spec_from_file_location("recipe_run", REPO / rr.RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
