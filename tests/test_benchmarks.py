"""benchmarks/: the equal-work model computes the same loss, bad arguments and output paths stop
before the run, a tiny BERT and ViT run end to end against the peer, the profile splits a
step's time by op kind, the GPU table's script, and the decoding and MAE benchmarks."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import subprocess
from pathlib import Path

import jax
import numpy as np
import pytest

from benchmarks import setups
from benchmarks import train_step as bench
from benchmarks.profile import markdown as profile_markdown
from benchmarks.profile import op_kind
from train import flops


def _args(*argv: str) -> argparse.Namespace:
    return bench.parse_args(list(argv))


def test_bert_default_predictions_follow_bert():
    assert setups.default_num_predictions(128) == 20
    assert setups.default_num_predictions(512) == 80
    assert setups.default_num_predictions(64) == math.ceil(0.15 * 64)


def test_equal_work_model_has_the_same_loss(tmp_path):
    """The head on every position, read at the predicted ones, is the same MLM loss, accuracy
    and NSP loss as the gathered head on the same batch and parameters: only the work differs."""
    common = ("--model", "bert", "--size", "tiny", "--seq", "32", "--batch", "3", "--peer",
              "none", "--dropout", "0")
    # Without the peer, only when asked for: it costs a compilation and device memory.
    assert setups.bert_setup(_args(*common), str(tmp_path)).equal_work is None
    setup = setups.bert_setup(_args(*common, "--equal_work"), str(tmp_path))
    every_model, every_flops = setup.equal_work
    assert every_flops > setup.task.flops_per_example()
    params = setup.task.init_variables(jax.random.PRNGKey(0),
                                       setup.task.dummy_inputs(1))["params"]
    every_task = bench._with_model(setup.task, every_model)
    assert every_task.model is every_model and setup.task.model is not every_model
    gathered = jax.device_get(setup.task.eval_fn(params, setup.batch))
    full = jax.device_get(every_task.eval_fn(params, setup.batch))
    for name in ("mlm_loss", "mlm_accuracy", "nsp_loss"):
        np.testing.assert_allclose(np.asarray(full[name][0]) / full[name][1],
                                   np.asarray(gathered[name][0]) / gathered[name][1],
                                   rtol=1e-5, atol=1e-6, err_msg=name)
    # ... while XLA counts the vocabulary projection at every position (b x l rows, not b x P).
    cfg = setup.task.model_config
    batch_size, num_positions = setup.batch["masked_positions"].shape

    def compiled_flops(model):
        logits = lambda p: model.apply(  # noqa: E731
            {"params": p}, setup.batch["input_ids"],
            masked_positions=setup.batch["masked_positions"])["mlm_logits"]
        return jax.jit(logits).lower(params).compile().cost_analysis()["flops"]

    extra_rows = batch_size * (32 - num_positions)
    assert (compiled_flops(every_model) - compiled_flops(setup.task.model)
            >= 2 * extra_rows * cfg.hidden_size * cfg.vocab_size)


def test_bad_arguments_name_the_fix(capsys):
    with pytest.raises(SystemExit, match="not a BERT size"):
        bench.run(_args("--model", "bert", "--size", "B/16", "--peer", "none"))
    with pytest.raises(SystemExit, match="max_position_embeddings"):
        bench.run(_args("--model", "bert", "--size", "tiny", "--seq", "4096", "--peer", "none"))
    with pytest.raises(SystemExit, match="written like B/16"):
        bench.run(_args("--model", "vit", "--size", "tiny", "--peer", "none"))
    with pytest.raises(SystemExit, match=r"--size Ti/15 --image_size 32: .*patch"):
        bench.run(_args("--model", "vit", "--size", "Ti/15", "--image_size", "32",
                        "--peer", "none"))
    for flag, value, message in (("--image_size", "0", "--image_size must be >= 1"),
                                 ("--peak_tflops", "-1", "--peak_tflops must be >= 0"),
                                 ("--seq", "999", "--seq is a BERT option; --model vit"),
                                 ("--equal_work", None, "--equal_work is a BERT option")):
        with pytest.raises(SystemExit) as stop:  # argparse: usage and the message on stderr
            _args("--model", "vit", "--size", "Ti/16", flag, *([value] if value else []))
        assert stop.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        _args("--model", "bert", "--size", "tiny", "--image_size", "32")
    assert stop.value.code == 2 and "--image_size is a VIT option" in capsys.readouterr().err
    assert (_args("--model", "bert", "--size", "tiny").seq,
            _args("--model", "vit", "--size", "Ti/16").image_size) == (128, 224)


def test_output_paths_are_checked_before_the_benchmark_runs(tmp_path, monkeypatch):
    """A --markdown or --json path that could not be written stops before the run (which can
    take many minutes), naming the fix; a missing folder is made."""
    ran = []
    monkeypatch.setattr(bench, "run", lambda args: ran.append(args) or {})
    for option in ("--json", "--markdown"):
        with pytest.raises(SystemExit, match=f"{option} {tmp_path} is a folder"):
            bench.main(["--model", "vit", "--size", "Ti/16", option, str(tmp_path)])
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SystemExit, match="cannot make its folder"):
        bench.main(["--model", "vit", "--size", "Ti/16", "--markdown", str(blocker / "t.md")])
    assert ran == []
    monkeypatch.setattr(bench, "_table", lambda report: "table")
    bench.main(["--model", "vit", "--size", "Ti/16", "--markdown", str(tmp_path / "a/b/t.md")])
    assert (tmp_path / "a/b/t.md").read_text() == "table\n" and len(ran) == 1


def test_attention_kernel_and_its_dropout_reach_the_model_and_the_report(tmp_path):
    report = bench.main(["--model", "vit", "--size", "Ti/16", "--image_size", "32", "--batch",
                         "2", "--steps", "1", "--repeats", "1", "--peer", "none", "--dropout",
                         "0.1", "--attention_dropout", "0", "--attention", "auto"])
    assert (report["attention"], report["dropout"], report["attention_dropout"]) == (
        "auto", 0.1, 0.0)
    assert "dropout 0.1 (attention 0.0), attention auto" in bench.markdown(report)
    args = _args("--model", "bert", "--size", "tiny", "--seq", "32", "--peer", "none")
    config = setups.bert_setup(args, str(tmp_path)).task.model_config
    assert (config.attention_implementation, config.attention_dropout_rate) == ("xla", 0.1)


def test_the_dropout_bits_generator_reaches_the_masks_and_the_report():
    """--prng rbg draws other dropout masks (another first loss on the same batch and weights),
    the report and its header name it, and jax's default is back afterwards; the default
    generator is named in the report but not in the header (as in the records before it)."""
    common = ["--model", "bert", "--size", "tiny", "--seq", "32", "--batch", "2", "--steps",
              "1", "--repeats", "1", "--peer", "none"]
    default = bench.main(common)
    rbg = bench.main([*common, "--prng", "rbg"])
    assert (default["prng"], rbg["prng"]) == ("threefry2x32", "rbg")
    assert jax.config.jax_default_prng_impl == "threefry2x32"
    first = [report["rows"][0]["first_loss"] for report in (default, rbg)]
    assert first[0] != pytest.approx(first[1], abs=1e-4)
    assert "(attention 0.1, rbg bits)" in bench.markdown(rbg)
    assert "(attention 0.1)," in bench.markdown(default)


def test_cudnn_attention_that_cannot_run_stops_before_compiling(tmp_path, capsys):
    """No NVIDIA GPU here: the reason and the fix; with attention dropout, that first."""
    common = ["--model", "bert", "--size", "tiny", "--seq", "32", "--peer", "none",
              "--attention", "cudnn"]
    with pytest.raises(SystemExit, match=r"--attention cudnn cannot run this benchmark: "
                                         r"attention-probability dropout is active \(rate 0.1\)"):
        setups.bert_setup(_args(*common), str(tmp_path))
    with pytest.raises(SystemExit, match=r"not an NVIDIA GPU\. Use --attention xla or auto"):
        setups.bert_setup(_args(*common, "--attention_dropout", "0", "--dtype", "bfloat16"),
                         str(tmp_path))
    with pytest.raises(SystemExit) as stop:
        _args(*common, "--attention_dropout", "1.0")
    assert stop.value.code == 2
    assert "--attention_dropout must be in [0, 1)" in capsys.readouterr().err


def test_cudnn_check_is_told_the_tokens_a_step_attends_over(tmp_path, monkeypatch):
    """The blocker hears the training step's lengths as the attention hands them to cuDNN:
    ViT-B/16's 196 patches + class token padded to an even 198 (cuDNN's backward refuses odd
    lengths), BERT's --seq as it is."""
    seen = []
    monkeypatch.setattr(setups, "cudnn_attention_blocker",
                        lambda *a, **k: seen.append(k["lengths"]) or None)
    common = ["--peer", "none", "--attention", "cudnn", "--attention_dropout", "0"]
    setups.vit_setup(_args("--model", "vit", "--size", "Ti/16", *common), str(tmp_path))
    setups.bert_setup(_args("--model", "bert", "--size", "tiny", "--seq", "32", *common),
                      str(tmp_path))
    assert seen == [(198, 198), (32, 32)]


@pytest.mark.parametrize("model_args", [
    ("--model", "bert", "--size", "tiny", "--seq", "32"),
    ("--model", "vit", "--size", "Ti/16", "--image_size", "32"),
], ids=["bert", "vit"])
def test_tiny_benchmark_against_the_peer(model_args, tmp_path):
    pytest.importorskip("transformers", reason="the `bench` extra (make bench)")
    report = bench.main([*model_args, "--batch", "2", "--steps", "1", "--repeats", "2",
                         "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md")])
    libraries = [row["library"] for row in report["rows"]]
    assert libraries.count("transformers") == 1 and "ours" in libraries
    ours = report["rows"][0]
    peer = next(row for row in report["rows"] if row["library"] == "transformers")
    # The same architecture: the same parameter count (BERT's NSP head and the tied decoder
    # included), and losses of freshly initialised models near log(classes).
    assert peer["params"] == ours["params"]
    classes = setups.BERT_VOCAB_SIZE if model_args[1] == "bert" else setups.IMAGENET_CLASSES
    for row in report["rows"]:
        assert all(t > 0 for t in row["step_s_rounds"]) and len(row["step_s_rounds"]) == 2
        assert 0 < row["mfu"] < 1.5
        # CPU: XLA's einsums; the step holds at least the parameters and Adam's two moments.
        assert row["attention_ran"] == "xla" and row["step_memory_bytes"] > 3 * 4 * row["params"]
        assert abs(row["first_loss"] - math.log(classes)) < 2.0 + (model_args[1] == "bert")
    assert report["ratios"]
    assert (tmp_path / "r.md").read_text().startswith(f"**{model_args[1]}")


def test_profile_splits_the_step_time_by_op_kind(tmp_path):
    report = bench.main(["--model", "vit", "--size", "Ti/16", "--image_size", "32", "--batch",
                         "2", "--steps", "2", "--repeats", "1", "--peer", "none",
                         "--profile", str(tmp_path / "trace")])
    profile = report["profile"]["ours"]
    assert Path(profile["trace"]).is_file() and profile["trace"].endswith(".xplane.pb")
    times = profile["op_ms_per_step"]
    assert times and all(ms >= 0 for ms in times.values()) and sum(times.values()) > 0
    assert not any(re.search(r"\.\d+$", kind) for kind in times)  # instances grouped by kind
    table = profile_markdown(report["profile"])
    assert "| op kind" in table and "**total**" in table


def test_op_kind_drops_the_instance_number():
    assert op_kind("copy_bitcast_fusion.85") == "copy_bitcast_fusion"
    assert op_kind("dot") == "dot"



def test_gpu_table_script_runs_the_three_bf16_rows(tmp_path):
    """benchmarks/gpu_table.sh (DRY_RUN prints its commands): each parses as benchmark flags,
    bf16 with cuDNN attention where it can run, and a flag given to the script wins."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_table.sh"
    printed = subprocess.run(["bash", str(script), str(tmp_path), "--peer", "none"],
                             env={**os.environ, "DRY_RUN": "1", "PYTHON": "py"}, check=True,
                             capture_output=True, text=True).stdout.splitlines()
    rows = {}
    for line in printed:
        words = line.split()
        assert words[:3] == ["py", "-m", "benchmarks.train_step"], line
        args = bench.parse_args(words[3:])
        rows[(args.model, args.size, args.seq if args.model == "bert" else None)] = args
    assert set(rows) == {("bert", "base", 128), ("bert", "large", 512), ("vit", "B/16", None)}
    for args in rows.values():
        assert (args.dtype, args.attention, args.attention_dropout, args.peer) == (
            "bfloat16", "auto", 0.0, "none")
        assert args.dropout is None and Path(args.json).parent == tmp_path
    assert not list(tmp_path.iterdir())                     # a dry run writes nothing
    usage = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage: bash benchmarks/gpu_table.sh OUTDIR" in usage.stderr


def test_gpu_table_script_goes_on_after_a_failed_row(tmp_path):
    """One failing row (here BERT-large, as an out-of-memory would) does not cost the others:
    all three run, the failed one is named, and the script exits 1."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_table.sh"
    fake = tmp_path / "fake_python"
    log = tmp_path / "ran.txt"
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\n'
                    '[[ " $* " != *" --size large "* ]]\n')
    fake.chmod(0o755)
    result = subprocess.run(["bash", str(script), str(tmp_path / "out")],
                            env={**os.environ, "PYTHON": str(fake)},
                            capture_output=True, text=True)
    ran = log.read_text().splitlines()
    assert [line.split()[5] for line in ran] == ["base", "large", "B/16"]
    assert result.returncode == 1
    assert "failed rows: bert_large_512 " in result.stderr
    assert "bert_base_128" not in result.stderr and "vit_b16" not in result.stderr


def test_gpu_table_script_runs_the_rows_named_in_ROWS(tmp_path):
    """ROWS picks rows (in the table's order) for a GPU lent a few minutes at a time; a name
    that is no row stops the script before anything runs, naming the rows."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_table.sh"
    fake = tmp_path / "fake_python"
    log = tmp_path / "ran.txt"
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\n')
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake)}
    subprocess.run(["bash", str(script), str(tmp_path / "out")], check=True,
                   env={**env, "ROWS": "vit_b16 bert_base_128"})
    assert [line.split()[5] for line in log.read_text().splitlines()] == ["base", "B/16"]
    log.unlink()
    wrong = subprocess.run(["bash", str(script), str(tmp_path / "out")], capture_output=True,
                           text=True, env={**env, "ROWS": "vit"})
    assert wrong.returncode == 2 and not log.exists()
    assert ("ROWS names vit, which is not a row; the rows: bert_base_128 bert_large_512 "
            "vit_b16") in wrong.stderr


def test_marian_decoding_benchmark_runs_and_records(tmp_path, capsys):
    """The translation benchmark at its tiny size (one batch size, to compile little): our row,
    the pooled search's and the peer's; ours translates exactly as generate does (the same
    weights and sentences), and its JSON record is one `python -m train.records save`
    commits."""
    from benchmarks import marian_decode
    from train import records

    out = tmp_path / "marian.json"
    report = marian_decode.main(["--size", "tiny", "--batches", "3", "--max_new_tokens", "5",
                                 "--repeats", "1", "--json", str(out)])
    rows = {r["label"].split(" 4.")[0]: r for r in report["rows"]}
    assert set(rows) == {marian_decode.OURS, marian_decode.POOLED, marian_decode.PEER}
    ours, peer = rows[marian_decode.OURS], rows[marian_decode.PEER]
    assert ours["same_as_peer"] == 1.0 and ours["generated_tokens"] == peer[
        "generated_tokens"] > 0
    assert report["ratios"] == {"batch 3 (peer time / ours)": pytest.approx(
        peer["batch_s"] / ours["batch_s"])}
    assert ours["sentences_per_s"] == pytest.approx(3 / ours["batch_s"])
    assert "| 3 | ours | " in marian_decode.markdown(report)
    saved = records.save(out, "bench_marian_decode", runs_dir=tmp_path / "runs", force=True)
    assert saved.exists()
    with pytest.raises(SystemExit) as stop:
        marian_decode.parse_args(["--size", "tiny", "--max_new_tokens", "200"])
    assert stop.value.code == 2
    assert "--max_new_tokens 200 does not fit the position table" in capsys.readouterr().err


def test_the_mae_step_benchmark_times_both_encoders_on_one_batch(tmp_path):
    """benchmarks/mae_step.py on the smoke config: the visible-only step and the mask-token
    step, the same model but for where the mask token sits (the encoder's instead of the
    decoder's), each with its own FLOPs; the record the docs' table is rendered from."""
    from benchmarks import mae_step
    from models.mae import MAEConfig
    from train import records, run_record
    from train.config import load_config_file
    from train.tasks.mae_pretrain import model_config

    out = tmp_path / "mae_step.json"
    report = mae_step.main(["--config", "configs/vit/mae.py:smoke", "--batch", "4", "--steps",
                            "1", "--repeats", "1", "--json", str(out)])
    visible, tokens = report["rows"]
    assert (visible["label"], tokens["label"]) == (mae_step.VISIBLE, mae_step.MASK_TOKENS)
    cfg: MAEConfig = model_config(load_config_file("configs/vit/mae.py:smoke"))
    assert tokens["params"] - visible["params"] == (cfg.encoder.hidden_size
                                                    - cfg.decoder.hidden_size)
    masked_cfg = dataclasses.replace(cfg, mask_token_in_encoder=True)
    assert report["ratios"]["model FLOPs ratio (mask tokens / visible only)"] == pytest.approx(
        flops.mae_train_flops_per_example(masked_cfg, 1)
        / flops.mae_train_flops_per_example(cfg, 1))
    assert report["ratios"][mae_step.RATIO] == pytest.approx(tokens["step_s"] / visible["step_s"])
    assert (report["visible"], report["patches"]) == (12, 49)
    record = run_record.load(out)
    assert record["kind"] == "benchmark" and record["metrics"]["table"] == mae_step.markdown(report)
    assert record["command"][:3] == ["python", "-m", "benchmarks.mae_step"]
    with pytest.raises(run_record.RecordError, match="stands for `python -m benchmarks.mae_step"):
        records.save(out, "bench_mae_step", runs_dir=tmp_path / "runs")
