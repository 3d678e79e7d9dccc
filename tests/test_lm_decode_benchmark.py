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
    without_batch_1 = {**report, "bound_fraction": {}}
    assert "- batch 1 not run (--batches)" in lm_decode.markdown(without_batch_1)
    saved = records.save(path, "bench_lm_decode", runs_dir=tmp_path / "runs", force=True)
    assert saved.exists()


def test_the_bandwidth_counts_each_byte_of_the_array_read_once(monkeypatch):
    """Decoding reads its weights once a token: the bound divides by the bytes read, so the
    measurement must count the array's bytes once a pass (not twice, as an `x + 1` that also
    writes would), here with every timed pass made to last exactly one second."""
    clock = iter(range(1000))
    monkeypatch.setattr(lm_decode, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    assert lm_decode.measure_bandwidth(2, repeats=3) == 2 * 2**20
