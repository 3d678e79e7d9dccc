"""The benchmark's report: per-contender rows (time, spread over rounds, throughput, TFLOPs, MFU,
step memory, the attention kernel that ran), the peer ratios, and the Markdown table
docs/benchmarks.md quotes. Pure arithmetic on the timings of ``benchmarks.train_step``; nothing
here runs a model.
"""

from __future__ import annotations

import os
import statistics
from typing import Sequence

import jax

OURS_EVERY_POSITION = "ours, MLM head on every position"


# A row whose slowest round took this much longer than its fastest was timed while the machine's
# load changed: its medians and ratios say more about the load than about the code.
NOISY_SPREAD = 1.15


def round_peaks(peak: float | None, probes: Sequence[float], repeats: int) -> list[float]:
    """The peak FLOP/s each round's MFU is computed against: `peak` (a data sheet's, or given)
    for every round, else the better of the two probes around the round (`time_rounds` probes
    before the first round and after each), measured under the same load as the round."""
    if peak is not None:
        return [peak] * repeats
    return [max(before, after) for before, after in zip(probes, probes[1:])]


def row_numbers(contender, batch: int, peaks: Sequence[float]) -> dict:
    """A contender's timing numbers: the median round's step time and throughput, the spread of
    its rounds (slowest / fastest), TFLOPs per step and MFU (the median over rounds of each
    round's FLOP/s over that round's peak), its compiled step's memory and attention kernel."""
    times = contender.times
    flops_per_step = contender.flops_per_example * batch
    step_seconds = statistics.median(times)
    return {"label": contender.label, "params": contender.num_params,
            "compile_s": contender.compile_seconds, "step_s": step_seconds,
            "step_s_rounds": times, "spread": max(times) / min(times),
            "examples_per_s": batch / step_seconds, "tflops_per_step": flops_per_step / 1e12,
            "mfu": statistics.median(flops_per_step / t / p for t, p in zip(times, peaks)),
            "step_memory_bytes": contender.memory_bytes,
            "attention_ran": contender.attention_ran, "first_loss": contender.first_loss}


def paired_ratio(slower, faster) -> tuple[float, list[float]]:
    """(the median over rounds of slower's time / faster's in the same round, [its smallest,
    its largest]): rounds run the contenders back to back, so each pair shares the load of its
    moment, which a ratio of medians taken from different rounds does not."""
    ratios = [a / b for a, b in zip(slower.times, faster.times)]
    return statistics.median(ratios), [min(ratios), max(ratios)]


def make_report(args, contenders: Sequence, *, tokens_per_example: int, shape: str,
                dropout: float, attention_dropout: float, attention: str, peaks: Sequence[float],
                peak_source: str) -> dict:
    """Rows from each contender's round times (`row_numbers`; `peaks`: each round's, see
    `round_peaks`), and the peer's time over ours (`paired_ratio`): the standard step, and
    equal work when a row of ours computes the peer's work."""
    rows = []
    for c in contenders:
        row = row_numbers(c, args.batch, peaks)
        row["library"] = c.library
        row["tokens_per_s"] = args.batch * tokens_per_example / row["step_s"]
        rows.append(row)
    by_label = {c.label: c for c in contenders}
    ratios, ratio_ranges = {}, {}
    peer = next((c for c in contenders if c.library == "transformers"), None)
    if peer is not None:
        pairs = {"standard step (peer time / ours)": by_label["ours"]}
        if OURS_EVERY_POSITION in by_label:
            pairs["equal work (peer time / ours, head on every position)"] = by_label[
                OURS_EVERY_POSITION]
        for name, ours in pairs.items():
            ratios[name], ratio_ranges[name] = paired_ratio(peer, ours)
    return {"model": args.model, "size": args.size, "shape": shape, "batch": args.batch,
            "dtype": args.dtype, "remat": args.remat, "dropout": dropout,
            "attention_dropout": attention_dropout, "attention": attention,
            "prng": jax.config.jax_default_prng_impl,
            **run_fields(args, peaks, peak_source),
            "rows": rows, "ratios": ratios, "ratio_ranges": ratio_ranges}


def run_fields(args, peaks: Sequence[float], peak_source: str) -> dict:
    """What every benchmark report says of the machine, the peak its MFU is against (the
    highest round's, and each round's) and how long it timed."""
    device = jax.devices()[0]
    return {"device": f"{device.platform}: {device.device_kind}", "cpu_count": os.cpu_count(),
            "jax": jax.__version__, "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "peak_tflops": max(peaks) / 1e12, "round_peak_tflops": [p / 1e12 for p in peaks],
            "peak_source": peak_source, "steps": args.steps, "repeats": args.repeats}


def _memory(row: dict) -> str:
    """A row's compiled step memory in GiB ('-' where XLA reported none)."""
    size = row.get("step_memory_bytes")
    return "-" if not size else f"{size / 2**30:.2f}"


def noise_note(report: dict) -> list[str]:
    """A warning line under a table whose rounds spread beyond NOISY_SPREAD."""
    worst = max(row.get("spread", 1.0) for row in report["rows"])
    if worst <= NOISY_SPREAD:
        return []
    return [f"- **rounds spread up to {worst:.2f}x** (a row's slowest round / its fastest): "
            "the machine's load changed during the run, so these medians and ratios measure "
            "the load as much as the code; rerun on an idle machine"]


def ratio_lines(report: dict) -> list[str]:
    """The ratios as bullets, each with its range over rounds where the report has one."""
    ranges = report.get("ratio_ranges", {})
    return [f"- {name}: **{value:.2f}x**" + (
        f" (rounds {ranges[name][0]:.2f}x to {ranges[name][1]:.2f}x)" if name in ranges else "")
        for name, value in report["ratios"].items()]


def _flop_rate(tflops: float) -> str:
    """``0.4634`` -> ``463.4 GFLOP/s``; ``989.0`` -> ``989.0 TFLOP/s``."""
    return f"{tflops:.1f} TFLOP/s" if tflops >= 1 else f"{tflops * 1e3:.1f} GFLOP/s"


def _bits(report: dict) -> str:
    """', rbg bits' where the dropout masks came from a generator other than jax's default
    (records from before the report named it used the default)."""
    prng = report.get("prng", "threefry2x32")
    return "" if prng == "threefry2x32" else f", {prng} bits"


def markdown(report: dict) -> str:
    """The report as a headed Markdown table plus the ratios as bullets."""
    head = (f"**{report['model']} {report['size']}**, batch {report['batch']}, {report['shape']}, "
            f"{report['dtype']}, dropout {report['dropout']} (attention "
            f"{report['attention_dropout']}{_bits(report)}), attention {report['attention']}, "
            f"remat {report['remat']}; {report['device']}; peak "
            f"{_flop_rate(report['peak_tflops'])} ({report['peak_source']}); median of "
            f"{report['repeats']} rounds of {report['steps']} steps")
    lines = [head, "",
             "| implementation | attention ran | parameters | compile s | step ms | rounds "
             "max/min | examples/s | tokens/s | TFLOPs/step | MFU | step memory GiB | "
             "first loss |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['label']} | {r['attention_ran']} | {r['params']:,} | "
                     f"{r['compile_s']:.1f} | {r['step_s'] * 1e3:.1f} | {r['spread']:.2f} | "
                     f"{r['examples_per_s']:.2f} | {r['tokens_per_s']:.0f} | "
                     f"{r['tflops_per_step']:.4g} | {r['mfu']:.1%} | {_memory(r)} | "
                     f"{r['first_loss']:.3f} |")
    extra = ratio_lines(report) + noise_note(report)
    return "\n".join(lines + ([""] + extra if extra else []))
