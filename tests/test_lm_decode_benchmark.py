"""benchmarks/lm_decode.py at a tiny size: both libraries decode the same weights and prompts
(greedy tokens equal), every row is timed, the bandwidth bound is computed, and the record is
one `python -m train.records save` accepts as bench_lm_decode."""

from __future__ import annotations

import types

import pytest

from benchmarks import lm_decode
from benchmarks.peers import import_transformers
from train import records, run_record


def test_the_decoding_benchmark_compares_both_libraries_on_the_same_weights(tmp_path):
    path = tmp_path / "lm_decode.json"
    report = lm_decode.main(["--size", "tiny", "--prompt_length", "6", "--new_tokens", "5",
                             "--repeats", "2", "--bandwidth_mb", "8", "--batches", "1,2",
                             "--json", str(path)])
    assert report["same_greedy_tokens"] == {"1": True, "2": True}
    rows = {(r["label"], r["decoding"], r["batch"]) for r in report["rows"]}
    assert rows == {(lib, d, b) for lib in ("ours", "transformers") for d in ("greedy", "sample")
                    for b in (1, 2)}
    assert all(len(r["times"]) == 2 and r["tokens_per_s"] > 0 for r in report["rows"])
    assert report["bound_tokens_per_s"] == pytest.approx(
        report["bandwidth_bytes_per_s"] / report["weight_bytes"])
    # The bound is one prompt's (a step reads the weights once for every row of its batch).
    greedy = next(r for r in report["rows"]
                  if (r["label"], r["decoding"], r["batch"]) == ("ours", "greedy", 1))
    assert report["bound_fraction"]["ours"] == pytest.approx(
        greedy["tokens_per_s"] / report["bound_tokens_per_s"])
    assert report["peer"] == f"transformers {import_transformers().__version__}"
    record = run_record.load(path)
    assert record["kind"] == "benchmark" and "| greedy | 2 | ours |" in record["metrics"]["table"]
    saved = records.save(path, "bench_lm_decode", runs_dir=tmp_path / "runs", force=True)
    assert saved.exists()


def test_the_bandwidth_bound_is_one_prompts_and_needs_batch_1():
    """The bound (bandwidth / bytes of weights) is for one prompt: a batch's step reads the
    weights once for all its rows. Without batch 1 there is no fraction of it to give (planted,
    batch 2's tokens/s per row over the bound was given as one)."""
    args = types.SimpleNamespace(batches=(2,), new_tokens=5, size="tiny", prompt_length=6)
    contenders = [lm_decode.Contender(label, decoding, 2, None, 1.0, times=[0.5])
                  for label in ("ours", "transformers") for decoding in lm_decode.DECODINGS]
    report = lm_decode.make_report(args, contenders, weight_bytes=1000, bandwidth=1e6,
                                   same={2: True})
    assert report["bound_tokens_per_s"] == 1000.0 and report["bound_fraction"] == {}
    assert "- batch 1 not run (--batches)" in lm_decode.markdown(report)
    args.batches = (1, 2)
    contenders += [lm_decode.Contender(label, decoding, 1, None, 1.0, times=[0.01])
                   for label in ("ours", "transformers") for decoding in lm_decode.DECODINGS]
    fraction = lm_decode.make_report(args, contenders, 1000, 1e6, {1: True, 2: True})[
        "bound_fraction"]
    assert fraction == {"ours": pytest.approx(0.5), "transformers": pytest.approx(0.5)}


def test_the_bandwidth_counts_each_byte_of_the_array_read_once(monkeypatch):
    """Decoding reads its weights once a token: the bound divides by the bytes read, so the
    measurement must count the array's bytes once a pass (not twice, as an `x + 1` that also
    writes would), here with every timed pass made to last exactly one second."""
    clock = iter(range(1000))
    monkeypatch.setattr(lm_decode, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    assert lm_decode.measure_bandwidth(2, repeats=3) == 2 * 2**20
