"""The benchmark's report: per-contender rows (time, throughput, TFLOPs, MFU), the peer ratios,
and the Markdown table docs/benchmarks.md quotes. Pure arithmetic on the timings of
``benchmarks.train_step``; nothing here runs a model.
"""

from __future__ import annotations

import os
import statistics
from typing import Sequence

import jax

OURS_EVERY_POSITION = "ours, MLM head on every position"


def make_report(args, contenders: Sequence, *, tokens_per_example: int, shape: str,
                dropout: float, attention_dropout: float, attention: str, peak: float,
                peak_source: str) -> dict:
    """Rows from each contender's round times (median), ratios of the peer's median time over
    ours: the standard step, and equal work when a row of ours computes the peer's work."""
    rows = []
    for c in contenders:
        step_seconds = statistics.median(c.times)
        flops_per_step = c.flops_per_example * args.batch
        rows.append({
            "label": c.label, "library": c.library, "params": c.num_params,
            "compile_s": c.compile_seconds, "step_s": step_seconds, "step_s_rounds": c.times,
            "examples_per_s": args.batch / step_seconds,
            "tokens_per_s": args.batch * tokens_per_example / step_seconds,
            "tflops_per_step": flops_per_step / 1e12,
            "mfu": flops_per_step / step_seconds / peak, "first_loss": c.first_loss})
    by_label = {row["label"]: row for row in rows}
    ratios = {}
    peer = next((row for row in rows if row["library"] == "transformers"), None)
    if peer is not None:
        ratios["standard step (peer time / ours)"] = peer["step_s"] / by_label["ours"]["step_s"]
        if OURS_EVERY_POSITION in by_label:
            ratios["equal work (peer time / ours, head on every position)"] = (
                peer["step_s"] / by_label[OURS_EVERY_POSITION]["step_s"])
    device = jax.devices()[0]
    return {"model": args.model, "size": args.size, "shape": shape, "batch": args.batch,
            "dtype": args.dtype, "remat": args.remat, "dropout": dropout,
            "attention_dropout": attention_dropout, "attention": attention,
            "prng": jax.config.jax_default_prng_impl,
            "device": f"{device.platform}: {device.device_kind}", "cpu_count": os.cpu_count(),
            "jax": jax.__version__, "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "peak_tflops": peak / 1e12, "peak_source": peak_source,
            "steps": args.steps, "repeats": args.repeats, "rows": rows, "ratios": ratios}


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
             "| implementation | parameters | compile s | step ms | examples/s | tokens/s | "
             "TFLOPs/step | MFU | first loss |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['label']} | {r['params']:,} | {r['compile_s']:.1f} | "
                     f"{r['step_s'] * 1e3:.1f} | {r['examples_per_s']:.2f} | "
                     f"{r['tokens_per_s']:.0f} | {r['tflops_per_step']:.4g} | "
                     f"{r['mfu']:.1%} | {r['first_loss']:.3f} |")
    if report["ratios"]:
        lines.append("")
        lines.extend(f"- {name}: **{value:.2f}x**" for name, value in report["ratios"].items())
    return "\n".join(lines)
