"""benchmarks/marian_decode.py at a tiny size: our beam search and FlaxMarianMTModel.generate
translate the same sentences with the same weights (every translation the same), every row is
timed, the ratios are the peer's median over ours, and the record is one `python -m
train.records save` accepts as bench_marian_decode."""

from __future__ import annotations

import statistics

import pytest

from benchmarks import marian_decode
from train import records, run_record


def test_the_translation_benchmark_compares_both_libraries_on_the_same_weights(tmp_path):
    path, table = tmp_path / "marian_decode.json", tmp_path / "marian_decode.md"
    report = marian_decode.main(["--size", "tiny", "--batches", "2", "--beam", "2",
                                 "--max_new_tokens", "6", "--repeats", "2",
                                 "--json", str(path), "--markdown", str(table)])
    rows = {r["label"].split(" 4.")[0]: r for r in report["rows"]}  # 'transformers 4.57.6'
    assert set(rows) == {marian_decode.OURS, marian_decode.POOLED, marian_decode.PEER}
    assert rows[marian_decode.OURS]["same_as_peer"] == 1.0
    assert all(len(r["batch_s_rounds"]) == 2 and r["sentences_per_s"] > 0 for r in rows.values())
    assert report["ratios"]["batch 2 (peer time / ours)"] == pytest.approx(
        statistics.median(rows[marian_decode.PEER]["batch_s_rounds"])
        / rows[marian_decode.OURS]["batch_s"])
    record = run_record.load(path)
    assert record["kind"] == "benchmark" and record["config"]["beam"] == 2
    assert record["metrics"]["table"] == table.read_text().rstrip("\n")
    saved = records.save(path, "bench_marian_decode", runs_dir=tmp_path / "runs", force=True)
    assert saved.exists()


def test_a_length_the_position_table_cannot_hold_is_refused():
    with pytest.raises(SystemExit):
        marian_decode.parse_args(["--size", "tiny", "--max_new_tokens", "200"])
