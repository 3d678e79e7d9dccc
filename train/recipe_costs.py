"""python -m train.recipe_costs [--mfu 0.4]

What the paper-scale recipes cost on a GPU node, a SLURM cluster and a TPU pod slice, estimated
from the FLOPs model (train/flops.py: the model's matmul FLOPs, x3 for training) at a stated
model-FLOPs utilisation (MFU) of the accelerators' data-sheet bf16 peaks (train/flops.py
GPU_BF16_PEAK_FLOPS, TPU_BF16_PEAK_FLOPS):

    step time        = model FLOPs of the step / (devices x peak x MFU)
    total time       = the sum over the run's phases of steps x step time
    accelerator-hours = total time x devices

The costs table's MFU is an assumption (40% is what a well-tuned Transformer step reaches on
these chips), not a measurement, and evaluation, BLEU decoding, checkpoints and input stalls are
not counted. Where a recipe's model has had its train step measured on a GPU
(benchmarks/train_step.py, a record named in MEASURED), `measured_table` gives that step's MFU
and memory and the recipe's total time on one 8-GPU node at the measured MFU.

`python -m train.tables` renders the tables into docs/launch.md (markers
`<!-- table: launch_recipes -->`, `<!-- table: launch_costs -->`, and
`<!-- table: launch_measured -->` with the records) from the recipes' configs as they are now,
so the page follows the configs; this command prints the first two at another MFU.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import math
import sys

from train import flops
from train.config import load_config_file, to_dataclass

DEFAULT_MFU = 0.4


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    config: str       # FILE:ARG, as the launch commands give it
    paper: str        # what the paper reports of its own run


RECIPES = (
    Recipe("BERT-base, Wikipedia", "configs/bert/pretrain.py:size=base,data=wikipedia",
           "4 days on 16 Cloud TPU chips (App. A.2)"),
    Recipe("BERT-large, Wikipedia", "configs/bert/pretrain.py:size=large,data=wikipedia",
           "4 days on 64 Cloud TPU chips (App. A.2)"),
    Recipe("ViT-B/16, ImageNet, from scratch", "configs/vit/imagenet.py",
           "not reported for ImageNet-1k"),
    Recipe("ViT-B/16, ImageNet, fine-tuned at 384",
           "configs/vit/imagenet.py:stage=finetune,init=workdirs/vit_b16_imagenet",
           "not reported"),
    Recipe("Transformer base, WMT 2014 en-de",
           "configs/transformer/translate.py:size=base,data=wmt14",
           "12 hours on 8 P100 GPUs (Sec. 5.2)"),
    Recipe("Transformer big, WMT 2014 en-de",
           "configs/transformer/translate.py:size=big,data=wmt14",
           "3.5 days on 8 P100 GPUs (Sec. 5.2)"),
)


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    chip: str         # for the tables
    device_kind: str  # as jax names it; its peak is train/flops.py spec_peak_flops
    devices: int
    hosts: int

    @property
    def peak(self) -> float:
        peak = flops.spec_peak_flops(self.device_kind)
        assert peak is not None, f"no peak for {self.device_kind!r} in train/flops.py"
        return peak


TARGETS = (
    Target("1 node, 8 x H100 SXM", "H100 SXM", "NVIDIA H100 80GB HBM3", devices=8, hosts=1),
    Target("SLURM, 4 nodes x 8 H100 SXM", "H100 SXM", "NVIDIA H100 80GB HBM3", devices=32,
           hosts=4),
    Target("TPU v5p-64 slice (32 chips, 8 hosts)", "TPU v5p", "TPU v5", devices=32, hosts=8),
)


@dataclasses.dataclass(frozen=True)
class Phase:
    steps: int
    batch: int                 # global batch: sequences, images or packed rows
    length: str                # what one example is, for the tables ('128 tokens', '224 px')
    flops_per_example: float   # training FLOPs (train/flops.py)

    @property
    def flops_per_step(self) -> float:
        return self.batch * self.flops_per_example


def _model_config(config):
    """The model's dataclass from the config, with the vocabulary size asked for (a trained
    WordPiece vocabulary of that size has exactly that many tokens)."""
    from models.bert import BertConfig
    from models.transformer import TransformerConfig
    from models.vit import ViTConfig

    section = config.model.copy_and_resolve_references()
    name = section.name
    with section.unlocked():
        del section["name"]
    if name == "vit":
        return to_dataclass(ViTConfig, section, "model")
    cls = {"bert": BertConfig, "transformer": TransformerConfig}[name]
    return to_dataclass(cls, section, "model", vocab_size=config.data.vocab_size)


def phases(config) -> list[Phase]:
    """The run's phases: BERT's two sequence lengths, one phase otherwise."""
    cfg, data, steps = _model_config(config), config.data, config.train.num_steps
    task = config.task.name
    if task == "bert_pretrain":
        from train.tasks.pretraining_inputs import phase2_steps

        second = phase2_steps(config)
        out = [Phase(steps - second, data.batch_size, f"{data.max_seq_length} tokens",
                     flops.bert_train_flops_per_example(cfg, data.max_seq_length,
                                                        data.max_predictions))]
        if second:
            out.append(Phase(second, data.phase2_batch_size,
                             f"{data.phase2_max_seq_length} tokens",
                             flops.bert_train_flops_per_example(
                                 cfg, data.phase2_max_seq_length, data.phase2_max_predictions)))
        return out
    if task == "classify":
        size = cfg.image_size[0]
        return [Phase(steps, data.batch_size, f"{size} px",
                      flops.vit_train_flops_per_example(cfg, channels=data.image_shape[-1]))]
    if task == "translate":
        return [Phase(steps, data.batch_size, f"{data.max_length} + {data.max_length} tokens",
                      flops.transformer_train_flops_per_example(cfg, data.max_length,
                                                                data.max_length))]
    raise ValueError(f"no cost model for task {task!r}")


def step_seconds(phase: Phase, target: Target, mfu: float) -> float:
    """Seconds of one step of `phase` on `target` at `mfu` of its peak (module docstring)."""
    return phase.flops_per_step / (target.devices * target.peak * mfu)


def run_seconds(run: list[Phase], target: Target, mfu: float) -> float:
    return sum(phase.steps * step_seconds(phase, target, mfu) for phase in run)


# ---- formatting ------------------------------------------------------------------------------
def _count(n: float) -> str:
    return f"{n:,.0f}"


def _flops(n: float) -> str:
    """4.3e17 -> '430 PFLOP' (three significant digits, the prefix of its thousands)."""
    prefixes = {3: "G", 4: "T", 5: "P", 6: "E", 7: "Z"}
    k = min(max(int(math.floor(math.log10(n) / 3)), 3), 7)
    return f"{n / 10 ** (3 * k):.3g} {prefixes[k]}FLOP"


def duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    hours = seconds / 3600
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"


def _joined(values) -> str:
    return " / ".join(values)


def recipes_table() -> str:
    """Each recipe's config, steps, batches and FLOPs (the cost of the run, device-free)."""
    lines = ["| recipe | config | steps | global batch | train FLOPs per step | train FLOPs in "
             "all | the paper's run |", "|---|---|---|---|---|---|---|"]
    for recipe in RECIPES:
        run = phases(load_config_file(recipe.config))
        total = sum(phase.steps * phase.flops_per_step for phase in run)
        lines.append(
            f"| {recipe.name} | `{recipe.config}` | {_joined(_count(p.steps) for p in run)} | "
            f"{_joined(f'{p.batch:,} x {p.length}' for p in run)} | "
            f"{_joined(_flops(p.flops_per_step) for p in run)} | {_flops(total)} | "
            f"{recipe.paper} |")
    return "\n".join(lines)


def costs_table(mfu: float = DEFAULT_MFU) -> str:
    """Each recipe on each target: mesh, batch per device, step time, total time,
    accelerator-hours, and the examples per second each host's input pipeline must deliver."""
    peaks = ", ".join(sorted({f"{t.chip} {t.peak / 1e12:.0f} TFLOP/s" for t in TARGETS}))
    lines = [f"Estimated at MFU {mfu:.0%} of the bf16 peaks per device ({peaks}); a step of "
             "several phases lists each phase. Not measured: no GPU or TPU has run these "
             "recipes here yet.", "",
             "| recipe | where | mesh | batch per device | step time | total time | "
             "accelerator-hours | examples/s per host |", "|---|---|---|---|---|---|---|---|"]
    for recipe in RECIPES:
        run = phases(load_config_file(recipe.config))
        for target in TARGETS:
            per_device = [p.batch / target.devices for p in run]
            steps = [step_seconds(p, target, mfu) for p in run]
            total = run_seconds(run, target, mfu)
            rate = [p.batch / s / target.hosts for p, s in zip(run, steps)]
            lines.append(
                f"| {recipe.name} | {target.name} | data={target.devices} | "
                f"{_joined(f'{b:g}' for b in per_device)} | "
                f"{_joined(duration(s) for s in steps)} | {duration(total)} | "
                f"{_count(total * target.devices / 3600)} | "
                f"{_joined(_count(r) for r in rate)} |")
    return "\n".join(lines)


# recipe -> the record (notebooks/results/runs/NAME) of its model's train step measured on a GPU
MEASURED = {"BERT-base, Wikipedia": "bench_gpu_bert_base_128",
            "ViT-B/16, ImageNet, from scratch": "bench_gpu_vit_b16"}


def differences(config, report: dict) -> list[str]:
    """How a measured step (a benchmarks/train_step.py report) was set up differently from the
    recipe `config` it stands for: dropout rates, the compute dtype the launch page gives
    (bfloat16), the generator of the dropout bits, and the jax version beside this
    checkout's. Attention-probability dropout
    matters twice: cuDNN's fused attention cannot apply it, so under `auto` the recipe's
    attention runs XLA's einsums where the measurement had cuDNN (its "ours" row says which ran;
    records from before that say nothing, and the difference is then hedged)."""
    out = []
    for key, name in (("dropout", "dropout_rate"), ("attention_dropout",
                                                    "attention_dropout_rate")):
        if key in report and float(report[key]) != float(config.model[name]):
            out.append(f"{key.replace('_', ' ')} {report[key]:g} (recipe "
                       f"{config.model[name]:g})")
    if report.get("dtype", "bfloat16") != "bfloat16":
        out.append(f"{report['dtype']} (launched in bfloat16)")
    ran = next((row.get("attention_ran") for row in report.get("rows", [])
                if row.get("label") == "ours"), None)  # records from before it: None
    if float(config.model.get("attention_dropout_rate", 0.0)) > 0 and report.get(
            "attention") in ("auto", "cudnn") and not float(report.get("attention_dropout", 0)):
        if ran == "cudnn" or report.get("attention") == "cudnn":
            out.append("cuDNN attention, where the recipe, with attention dropout, falls back to "
                       "XLA's")
        elif ran is None:
            out.append("cuDNN attention if `auto` could run it there (the record does not say), "
                       "where the recipe, with attention dropout, falls back to XLA's")
    if report.get("prng", "threefry2x32") != "threefry2x32":  # benchmarks.train_step --prng
        out.append(f"{report['prng']} dropout bits (the trainer's: threefry2x32)")
    here = importlib.metadata.version("jax")
    if report.get("jax") and report["jax"] != here:
        out.append(f"jax {report['jax']} (this checkout pins {here})")
    return out


def measured_table(records) -> str:
    """Each recipe of MEASURED: what its record measured (the step, its MFU, its compiled step's
    device memory, `memory_of`), how its setup differs from the recipe's (`differences`), and
    the recipe's total time on one 8-GPU node at that MFU beside the estimate at DEFAULT_MFU.
    `records.get(name)` gives a record or None (train/result_tables.Records)."""
    node = TARGETS[0]
    lines = ["| recipe | measured (record) | differs from the recipe | step | MFU | device memory "
             f"(the step's) | total time on {node.name} at the measured MFU | at {DEFAULT_MFU:.0%} "
             "(estimate) |", "|---|---|---|---|---|---|---|---|"]
    for recipe in RECIPES:
        name = MEASURED.get(recipe.name)
        if name is None:
            continue
        config = load_config_file(recipe.config)
        run = phases(config)
        estimate = duration(run_seconds(run, node, DEFAULT_MFU))
        record = records.get(name)
        if record is None:
            lines.append(f"| {recipe.name} | `{name}`: not recorded yet | - | - | - | - | - | "
                         f"{estimate} |")
            continue
        report, machine = record["metrics"], record["machine"]
        if machine["device_kind"] != node.device_kind:
            raise ValueError(f"{name} ran on {machine['device_kind']!r}, not the "
                             f"{node.device_kind!r} of {node.name!r}: its MFU does not carry over")
        (ours,) = [row for row in report["rows"] if row["label"] == "ours"]
        memory = memory_of(ours, machine)
        lines.append(
            f"| {recipe.name} | `{name}`: {report['model']} {report['size']}, {report['shape']}, "
            f"batch {report['batch']} on one device, {report['dtype']}, attention "
            f"{report['attention']} | {'; '.join(differences(config, report)) or 'nothing'} "
            f"| {duration(ours['step_s'])} | {ours['mfu']:.1%} | {memory} | "
            f"{duration(run_seconds(run, node, ours['mfu']))} | {estimate} |")
    return "\n".join(lines)


def memory_of(row: dict, machine: dict) -> str:
    """The row's compiled step memory where its record has it; records from before it say only
    the process's peak, which holds every contender the benchmark compiled (said so)."""
    if row.get("step_memory_bytes"):
        return f"{row['step_memory_bytes'] / 2**30:.1f} GiB"
    peak = max((d["peak_bytes_in_use"] for d in machine["device_memory"] or []), default=None)
    return "-" if peak is None else f"{peak / 2**30:.1f} GiB (the process's, all rows)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.recipe_costs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mfu", type=float, default=DEFAULT_MFU,
                        help="model-FLOPs utilisation assumed (default %(default)s)")
    args = parser.parse_args(argv)
    if not 0 < args.mfu <= 1:
        parser.error(f"--mfu {args.mfu} must be in (0, 1]")
    print(recipes_table() + "\n\n" + costs_table(args.mfu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
