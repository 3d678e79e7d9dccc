"""python -m benchmarks.mae_step --steps 3 --repeats 5 --json workdirs/bench/mae_step.json

The masked autoencoder's design claim (He et al. 2022, Sec. 3 and Table 2): an encoder that
sees only the visible patches trains several times faster than the same model encoding every
patch with mask tokens in the masked places (Table 1c's other row; 2.8x wall clock for ViT-L
with an 8-block decoder, 3.5-4.1x for a smaller decoder or a larger encoder, at 75% masking).
This times both train steps in one run, on the same batch:

  visible patches only       configs/vit/mae.py as it is (`--config`), mask_ratio 0.75:
                             the encoder on the class token and K = 12 of 49 patches
  mask tokens in the encoder the same config with mask_token_in_encoder: the encoder on the
                             class token and all 49 patches

What is timed is what the trainer runs: train.train_step.make_train_step around
train/tasks/mae_pretrain.py's loss with the config's optax chain (AdamW), jax.jit with the
state donated, on one device; the batch is random images with a random patch order per image,
as the pipeline gives (data/pipelines/patch_masking.py). Compile first (time reported apart),
one warm-up step, then `--repeats` rounds of `--steps` steps of each in turn, the order
reversed every other round; each row is its median round (benchmarks/train_step.py's timing
and MFU: against the data sheet for bf16 on a GPU or TPU, else matmuls measured around each
round). The ratio is the median over rounds of the mask-token step's time over the visible-only
one's in the same round: the issue's target is 2.5x or more.

  python -m benchmarks.mae_step --config configs/vit/mae.py:smoke --steps 1 --repeats 1  # tests
"""

from __future__ import annotations

import argparse
import contextlib
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import train_step as bench
from benchmarks.outputs import benchmark_record, run_command
from benchmarks.report import (_flop_rate, _memory, noise_note, paired_ratio, ratio_lines,
                               round_peaks, row_numbers, run_fields)
from data.pipelines.patch_masking import KEY, patch_orders
from train import flops, partitioning
from train.config import apply_override, load_config_file
from train.optimizers import make_optimizer

VISIBLE, MASK_TOKENS = "visible patches only", "mask tokens in the encoder"
RATIO = "speedup (mask-token step time / visible-only step time)"


def _task(config_spec: str, batch: int, mask_token_in_encoder: bool):
    from train.tasks.mae_pretrain import MAEPretrainingTask

    config = load_config_file(config_spec)
    apply_override(config, "data.batch_size", str(batch))
    apply_override(config, "model.mask_token_in_encoder", str(mask_token_in_encoder))
    return config, MAEPretrainingTask(config)


def mae_batch(rng: np.random.Generator, batch: int, image_shape, num_patches: int) -> dict:
    """Images of normal noise, all real, each with a random patch order (the pipeline's)."""
    return {"image": rng.normal(size=(batch, *image_shape)).astype(np.float32),
            "label": np.zeros((batch,), np.int32), "mask": np.ones((batch,), np.float32),
            KEY: patch_orders(rng, batch, num_patches)}


def build_contenders(args):
    """(the two compiled steps, the visible-only model's MAEConfig)."""
    contenders, configs = [], []
    batch = None
    for label, tokens in ((VISIBLE, False), (MASK_TOKENS, True)):
        config, task = _task(args.config, args.batch, tokens)
        if batch is None:
            batch = mae_batch(np.random.default_rng(args.seed), args.batch, task.image_shape,
                              task.model_config.num_patches)
        optimizer, schedule = make_optimizer(config.optimizer, d_model=task.d_model,
                                             num_steps=config.train.num_steps)
        setup = bench.Setup(task=task, config=config, optimizer=optimizer, schedule=schedule,
                            batch=batch, tokens_per_example=task.model_config.num_patches)
        init = lambda rng, task=task: nn.meta.unbox(  # noqa: E731
            task.init_variables(rng, task.dummy_inputs(1))["params"])
        contenders.append(bench._compile(label, "ours", task, setup, init, batch,
                                         task.flops_per_example(), args.seed))
        configs.append(task.model_config)
    return contenders, configs[0]


def make_report(args, contenders, peaks: list[float], peak_source: str, cfg) -> dict:
    """Rows as benchmarks/report.py makes them (`peaks`: each round's), and the speedup of the
    visible-only step (paired by round, with its range)."""
    rows = [row_numbers(c, args.batch, peaks) for c in contenders]
    by_label = {c.label: c for c in contenders}
    speedup, speedup_range = paired_ratio(by_label[MASK_TOKENS], by_label[VISIBLE])
    return {"config": args.config, "batch": args.batch, "mask_ratio": cfg.mask_ratio,
            "patches": cfg.num_patches, "visible": cfg.num_visible,
            "encoder": f"{cfg.encoder.num_layers} x {cfg.encoder.hidden_size}",
            "decoder": f"{cfg.decoder.num_layers} x {cfg.decoder.hidden_size}",
            "dtype": str(cfg.encoder.dtype), **run_fields(args, peaks, peak_source),
            "rows": rows,
            "ratios": {RATIO: speedup,
                       "model FLOPs ratio (mask tokens / visible only)":
                           by_label[MASK_TOKENS].flops_per_example
                           / by_label[VISIBLE].flops_per_example},
            "ratio_ranges": {RATIO: speedup_range}}


def markdown(report: dict) -> str:
    head = (f"**MAE pretraining step** (`{report['config']}`), batch {report['batch']}, "
            f"mask ratio {report['mask_ratio']} ({report['visible']} of {report['patches']} "
            f"patches visible), encoder {report['encoder']}, decoder {report['decoder']}; "
            f"{report['device']}; peak {_flop_rate(report['peak_tflops'])} "
            f"({report['peak_source']}); median of {report['repeats']} rounds of "
            f"{report['steps']} steps")
    lines = [head, "", "| encoder | parameters | compile s | step ms | rounds max/min | "
             "examples/s | TFLOPs/step | MFU | step memory GiB | first loss |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['label']} | {r['params']:,} | {r['compile_s']:.1f} | "
                     f"{r['step_s'] * 1e3:.1f} | {r['spread']:.2f} | "
                     f"{r['examples_per_s']:.1f} | {r['tflops_per_step']:.4g} | {r['mfu']:.1%} | "
                     f"{_memory(r)} | {r['first_loss']:.3f} |")
    lines.append("")
    lines.extend(ratio_lines(report) + noise_note(report))
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mae_step",
                                     description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/vit/mae.py",
                        help="the MAE pretraining config (FILE[:ARG]) whose step is timed")
    parser.add_argument("--batch", type=int, default=256, help="images per step")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (alternating)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", default="", help="also write the table as Markdown here")
    parser.add_argument("--json", default="",
                        help="also write the run record (train/run_record.py) here")
    args = parser.parse_args(argv)
    for name in ("batch", "steps", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    return args


def run(args) -> dict:
    mesh = partitioning.make_mesh(load_config_file(args.config).mesh, devices=jax.devices()[:1])
    with contextlib.ExitStack() as stack:  # as the trainer traces its step
        stack.enter_context(jax.set_mesh(mesh))
        stack.enter_context(nn.logical_axis_rules(partitioning.LOGICAL_RULES))
        contenders, cfg = build_contenders(args)
        dtype = str(jnp.dtype(cfg.encoder.dtype))
        peak, peak_source = bench.peak_for(dtype)
        probe = None if peak is not None else (lambda: flops.measure_matmul_peak(dtype=dtype))
        probes = bench.time_rounds(contenders, steps=args.steps, repeats=args.repeats,
                                   peak_probe=probe)
    return make_report(args, contenders, round_peaks(peak, probes, args.repeats), peak_source,
                       cfg)


def record(args, report: dict, command: list[str], started: float) -> dict:
    """The run record (train/run_record.py): the report as its metrics, with the table."""
    return benchmark_record(args, report, markdown(report), command, started,
                            peak=report["peak_tflops"] * 1e12, peak_source=report["peak_source"])


def main(argv=None) -> dict:
    """`python -m benchmarks.mae_step`; `--json FILE` writes the record that
    `python -m train.records save FILE bench_mae_step` commits."""
    return run_command("benchmarks.mae_step", argv, parse_args=parse_args, run=run,
                       table=markdown, record=record)


if __name__ == "__main__":
    main(sys.argv[1:])
