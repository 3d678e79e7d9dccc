"""benchmarks/report.py and the timing of benchmarks/train_step.py: every number of a row follows
from its contender's round times (median, spread, MFU against each round's peak, paired ratios),
a compiled step's memory and attention kernel, the matmul peak, and the data-sheet peaks."""

from __future__ import annotations

import argparse
import dataclasses

import jax
import numpy as np
import pytest

from benchmarks import setups
from benchmarks import train_step as bench
from train import flops


def _args(*argv: str) -> argparse.Namespace:
    return bench.parse_args(list(argv))


def _vit_stub() -> tuple[argparse.Namespace, setups.Setup]:
    """A ViT benchmark's arguments (batch 4) and a Setup standing in for its model (197 tokens,
    no dropout, XLA attention): what the report reads of them."""
    args = _args("--model", "vit", "--size", "Ti/16", "--batch", "4", "--peer", "none")
    model_config = type("C", (), {"dropout_rate": 0.0, "attention_dropout_rate": 0.0,
                                  "attention_implementation": "xla"})
    return args, setups.Setup(task=type("T", (), {"model_config": model_config})(),
                              config=None, optimizer=None, schedule=None, batch={},
                              tokens_per_example=197)


def test_report_numbers_follow_from_the_timings():
    """Every row's numbers are its own: median time, throughput, TFLOPs = its FLOPs per example x
    batch / 1e12, MFU = FLOPs per step / median step time / peak (each contender with its own
    FLOPs), and both ratios (peer over ours; peer over ours with the head on every position),
    each the median of the rounds' own ratios (not the ratio of medians from other rounds)."""
    args, setup = _vit_stub()
    ours = bench.Contender("ours", "ours", None, None, {}, flops_per_example=1e9,
                           num_params=10, compile_seconds=1.0, times=[0.5, 0.2, 0.3],
                           memory_bytes=3 * 2**29)
    every = bench.Contender(bench.OURS_EVERY_POSITION, "ours", None, None, {},
                            flops_per_example=1.5e9, num_params=10, compile_seconds=1.0,
                            times=[0.4, 0.5, 0.45])
    peer = bench.Contender("transformers 4.57.6", "transformers", None, None, {},
                           flops_per_example=2e9, num_params=10, compile_seconds=1.0,
                           times=[0.6, 0.3, 0.9])
    report = bench.report_for(args, setup, [ours, every, peer], [1e11] * 3, "given")
    row = report["rows"][0]
    assert row["step_s"] == 0.3                                  # the median of the rounds
    assert row["examples_per_s"] == pytest.approx(4 / 0.3)
    assert row["tokens_per_s"] == pytest.approx(4 * 197 / 0.3)
    assert row["mfu"] == pytest.approx(4e9 / 0.3 / 1e11)
    assert row["spread"] == pytest.approx(0.5 / 0.2)
    for row, flops_per_example, median in zip(report["rows"], (1e9, 1.5e9, 2e9),
                                              (0.3, 0.45, 0.6)):
        assert row["step_s"] == pytest.approx(median), row["label"]
        assert row["tflops_per_step"] == pytest.approx(4 * flops_per_example / 1e12)
        assert row["mfu"] == pytest.approx(4 * flops_per_example / median / 1e11), row["label"]
    # Rounds: peer / ours 1.2, 1.5, 3.0; peer / every 1.5, 0.6, 2.0 (medians' ratios: 2.0, 1.33).
    assert report["ratios"] == pytest.approx({
        "standard step (peer time / ours)": 1.5,
        "equal work (peer time / ours, head on every position)": 1.5})
    assert report["ratio_ranges"]["standard step (peer time / ours)"] == pytest.approx([1.2, 3.0])
    assert report["shape"] == "224x224, 197 tokens"
    table = bench.markdown(report)
    assert "| ours |" in table and "peak 100.0 GFLOP/s (given)" in table
    # ours: 300.0 ms, 4e9 FLOPs = 0.004 TFLOPs per step, MFU 4e9 / 0.3 / 1e11 = 13.3%.
    assert "| ours | xla | 10 | 1.0 | 300.0 | 2.50 | 13.33 | 2627 | 0.004 | 13.3% | 1.50 |" in table
    assert ("- equal work (peer time / ours, head on every position): **1.50x** (rounds 0.60x to "
            "2.00x)") in table
    assert "rounds spread up to 3.00x" in table  # the peer's 0.9 / 0.3: a busy machine
    report["peak_tflops"] = 989.0
    assert "peak 989.0 TFLOP/s" in bench.markdown(report)
    steady = [dataclasses.replace(c, times=[0.30, 0.31, 0.32]) for c in (ours, every, peer)]
    assert "spread" not in bench.markdown(bench.report_for(args, setup, steady, [1e11] * 3, "x"))


def test_each_rounds_mfu_is_against_the_peak_probed_around_it():
    """A measured peak is probed before the first round and after each; a round's MFU is against
    the better probe beside it (the load of its moment), the row's the median over rounds."""
    from benchmarks.report import round_peaks

    assert round_peaks(None, [1.0, 3.0, 2.0, 5.0], 3) == [3.0, 3.0, 5.0]
    assert round_peaks(7.0, [], 2) == [7.0, 7.0]
    args, setup = _vit_stub()
    ours = bench.Contender("ours", "ours", None, None, {}, flops_per_example=1e9,
                           num_params=10, compile_seconds=1.0, times=[0.5, 0.2, 0.3])
    report = bench.report_for(args, setup, [ours], [1e11, 2e11, 1e11], "measured")
    # Rounds: 4e9 / 0.5 / 1e11 = 8%, 4e9 / 0.2 / 2e11 = 10%, 4e9 / 0.3 / 1e11 = 13.3%.
    assert report["rows"][0]["mfu"] == pytest.approx(0.1)
    assert report["round_peak_tflops"] == [0.1, 0.2, 0.1] and report["peak_tflops"] == 0.2


def test_a_compiled_step_says_its_memory_and_its_attention_kernel():
    """XLA's memory analysis of a compiled step (donated buffers once), and the kernel read from
    the lowered step: cuDNN's fused-attention call where it is there (the GPU's), else 'xla'."""
    compiled = jax.jit(lambda x: (x @ x, x), donate_argnums=0).lower(
        jax.numpy.ones((64, 64))).compile()
    assert bench.step_memory(compiled) >= 2 * 64 * 64 * 4
    assert bench.attention_kernel('stablehlo.custom_call @"__cudnn$fmhaSoftmax"(%0)') == "cudnn"
    assert bench.attention_kernel("stablehlo.dot_general %0, %1") == "xla"


def test_the_matmul_peak_counts_every_matmul_of_the_chain(monkeypatch):
    """measure_matmul_peak times `chain` dependent matmuls in one call (on accelerators, 32 by
    default: one alone is shorter than its launch; on a CPU one): FLOP/s = 2 n^3 x chain / the
    best call's seconds (each timed call made to last exactly one second here), and the chain
    does multiply that many times (x @ (2I)^3 = 8x)."""
    x = np.arange(4.0).reshape(2, 2)
    np.testing.assert_allclose(flops.chained_matmuls(3)(x, 2 * np.eye(2)), 8 * x)
    for backend, chain in (("cpu", 1), ("gpu", 32)):
        clock = iter(range(1000))
        monkeypatch.setattr(flops, "time", type("FakeTime", (), {
            "perf_counter": staticmethod(lambda: next(clock))}))
        monkeypatch.setattr(jax, "default_backend", lambda: backend)
        assert flops.measure_matmul_peak(size=8, repeats=2) == 2 * 8 ** 3 * chain, backend
    assert flops.measure_matmul_peak(size=8, repeats=2, chain=3) == 2 * 8 ** 3 * 3


def test_contender_times_are_seconds_per_step(monkeypatch):
    """Contender.run returns the round's wall time divided by its steps (on a fake clock that
    each step advances by 0.25 s), threading the state through every step."""
    clock = [100.0]

    def step(state, batch):
        clock[0] += 0.25
        return state + 1, {"loss": (state, 1)}

    monkeypatch.setattr(bench, "time", type("FakeTime", (), {
        "perf_counter": staticmethod(lambda: clock[0])}))
    contender = bench.Contender("ours", "ours", step, 0, {}, flops_per_example=1.0,
                                num_params=1, compile_seconds=0.0)
    assert contender.run(4) == pytest.approx(0.25)
    assert contender.state == 4
    assert contender.run(2) == pytest.approx(0.25) and contender.state == 6


def test_time_rounds_alternate_the_order_and_probe_the_peak_around_each_round():
    """Round i runs the contenders in order (even i) or reversed (odd i), each gets one time per
    round, and the peak is probed before the first round and after every round."""
    calls = []

    def contender(label):
        def step(state, batch):
            calls.append(label)
            return state, {}
        return bench.Contender(label, "ours", step, 0, {}, flops_per_example=1.0,
                               num_params=1, compile_seconds=0.0)

    contenders = [contender("a"), contender("b")]
    probes = iter(range(10))
    peaks = bench.time_rounds(contenders, steps=2, repeats=3, peak_probe=lambda: next(probes))
    assert calls == ["a", "a", "b", "b", "b", "b", "a", "a", "a", "a", "b", "b"]
    assert peaks == [0, 1, 2, 3]
    assert [len(c.times) for c in contenders] == [3, 3]
    assert bench.time_rounds(contenders, steps=1, repeats=1, peak_probe=None) == []


def test_spec_peaks_by_device_kind():
    assert flops.spec_peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert flops.spec_peak_flops("NVIDIA H100 PCIe") == 756e12
    assert flops.spec_peak_flops("NVIDIA H100 NVL") == 835e12
    assert flops.spec_peak_flops("NVIDIA H200") == 989e12
    assert flops.spec_peak_flops("NVIDIA H200 NVL") == 835e12
    assert flops.spec_peak_flops("NVIDIA GH200 480GB") == 989e12
    assert flops.spec_peak_flops("TPU v4") == 275e12
    assert flops.spec_peak_flops("TPU v5 lite") == 197e12       # v5e's device_kind
    assert flops.spec_peak_flops("TPU v5") == 459e12            # v5p's
    assert flops.spec_peak_flops("cpu") is None


def test_an_accelerators_mfu_of_a_bfloat16_model_is_against_its_data_sheet(monkeypatch,
                                                                          fashion_mnist_env):
    """The trainer's and the benchmark's peak on a GPU or TPU for a bfloat16 model: the data
    sheet (a 2048^3 matmul timed in one call, in float32, understated it); measured elsewhere."""
    from types import SimpleNamespace

    from train.config import apply_override, load_config_file
    from train.trainer import Trainer

    h100 = SimpleNamespace(platform="gpu", device_kind="NVIDIA H100 80GB HBM3")
    v4 = SimpleNamespace(platform="tpu", device_kind="TPU v4")
    assert flops.data_sheet_peak(h100, "bfloat16") == 989e12
    assert flops.data_sheet_peak(v4, "bfloat16") == 275e12
    assert flops.data_sheet_peak(h100, "float32") is None
    assert flops.data_sheet_peak(SimpleNamespace(platform="cpu", device_kind="cpu"),
                                 "bfloat16") is None
    config = load_config_file("configs/vit/fashion_mnist.py:smoke")
    apply_override(config, "model.dtype", "bfloat16")
    trainer = Trainer(config, "unused")
    given = load_config_file("configs/vit/fashion_mnist.py:smoke")
    apply_override(given, "model.dtype", "bfloat16")
    apply_override(given, "train.peak_flops", "5e14")  # given: taken as it is
    told = Trainer(given, "unused")
    monkeypatch.setattr(jax, "devices", lambda: [h100])
    assert trainer._peak_flops() == (989e12, "the NVIDIA H100 80GB HBM3 data sheet's dense "
                                             "bf16 peak")
    assert told._peak_flops() == (5e14, "config.train.peak_flops")
    # a GPU without a data sheet here: bfloat16 matmuls are timed for a bfloat16 model (float32
    # ones, several times slower on tensor cores, would overstate its MFU as many times)
    timed = []
    monkeypatch.setattr(flops, "measure_matmul_peak",
                        lambda dtype=None, **kw: timed.append(dtype) or 123e12)
    flops.measured_peak_flops.cache_clear()
    monkeypatch.setattr(jax, "devices", lambda: [SimpleNamespace(platform="gpu",
                                                                 device_kind="NVIDIA L4")])
    assert trainer._peak_flops() == (123e12, "bfloat16 matmuls measured here by "
                                             "train/flops.py measure_matmul_peak")
    assert [str(dtype) for dtype in timed] == ["bfloat16"]
    flops.measured_peak_flops.cache_clear()  # the process's real measurement, not this one
