"""The paper-scale recipes' models at their real size on one GPU, on TFDS's mock data: the runs
that docs/launch.md's measured table reads, their commands, and the table.

One run per phase of each recipe (train/recipe_costs.py RECIPES): `python -m train` through
tests/scripts/recipe_run.py, which mocks TFDS (tests/tfds_mock.py: the real builders' features
and splits, random examples; ImageNet's images 5 to 49 pixels a side before the crop to the
model's size, so the input pipeline costs less than on real JPEGs), with

  - the recipe's config and the launch page's GPU flags: bf16 compute, fp32 parameters,
    cuDNN attention where it applies (`attention_implementation=auto`);
  - the batch one GPU of an 8-GPU node takes: the phase's global batch / 8 (recipe_costs
    TARGETS[0]), so the step is the one each GPU of that node runs, less the gradient
    all-reduce;
  - STEPS steps, logged every LOG_EVERY: the record's train metrics are the last window's,
    after compilation and warm-up;
  - and what a few hundred steps on mock data need: warmup within the run, small held-out
    slices, BERT's WordPiece vocabulary trained on VOCAB_ARTICLES mock articles and its
    examples shuffled in windows of 1,000 (each input worker fills its own first), the
    Transformer's checkpoint averaging off (the run keeps one checkpoint). BERT's two phases
    run apart (phase2_fraction 0, the second at 512 tokens with 80 predictions) so that each
    has its own step time; ViT's fine-tuning starts from the from-scratch run's checkpoint, as
    the recipe does.

The table computes everything from the records: the step time (1 / steps per second of the last
window: the step log's wall clock, so an input pipeline that cannot keep up shows as a longer
step, and the step log's `input_wait_fraction` says how much), the MFU of the model as it ran
(the record's config: its vocabulary is the one trained) against the device's bf16 data-sheet
peak (train/flops.py spec_peak_flops, whatever the record's own figure: older records measured
a matmul), the device memory at its peak, and the phase's steps at that step time, which is
its time on 8 such GPUs if the all-reduce overlaps the backward pass. A record of another
command than its run's (extra overrides) is refused. `settings()` lists the overrides beneath
the table.

    python -m benchmarks.gpu_recipes            # runs them on a GPU machine (benchmarks.md#gpu)
"""

from __future__ import annotations

import dataclasses
import shlex

import ml_collections

from train import flops
from train.config import apply_override, load_config_file
from train.recipe_costs import RECIPES, TARGETS, Phase, Recipe, duration, phases

STEPS = 200
LOG_EVERY = 50
WARMUP = 20
WORKERS = 12            # input worker processes: a 16-core GPU machine's, less the main ones
VOCAB_ARTICLES = 5000
WORKDIRS = "workdirs/gpu_recipes"
RUNNER = "tests/scripts/recipe_run.py"

# Per config file: (short name, mock examples per split, its overrides beside the batch's).
TASKS = {
    "configs/bert/pretrain.py": ("bert", 30_000, (
        f"--config.data.vocab_sample_documents={VOCAB_ARTICLES}",
        "--config.data.train_split=train[:-256]", "--config.data.eval_split=train[-256:]",
        "--config.data.shuffle_window=1000", "--config.data.phase2_fraction=0")),
    "configs/vit/imagenet.py": ("vit", 10_000, ("--config.data.eval_split=validation[:1024]",)),
    "configs/transformer/translate.py": ("transformer", 8_000, (
        "--config.data.eval_split=test[:64]", "--config.train.average_checkpoints=0",
        "--config.train.keep_checkpoints=1")),
}
COMMON = ("--config.model.dtype=bfloat16", "--config.model.attention_implementation=auto",
          f"--config.train.num_steps={STEPS}", f"--config.optimizer.warmup_steps={WARMUP}",
          f"--config.train.log_every={LOG_EVERY}", "--config.train.eval_every=0",
          f"--config.train.checkpoint_every={STEPS}", "--config.train.progress_bar=false",
          f"--config.data.worker_count={WORKERS}")


@dataclasses.dataclass(frozen=True)
class RecipeRun:
    name: str                  # its record: notebooks/results/runs/NAME
    recipe: Recipe
    phase: int                 # of phases(the recipe's config)
    recipe_phase: Phase        # that phase, at the recipe's global batch and steps
    config: str                # FILE:ARG as run
    mock_examples: int
    overrides: tuple[str, ...]

    @property
    def workdir(self) -> str:
        return f"{WORKDIRS}/{self.name.removeprefix('gpu_recipe_')}"

    @property
    def command(self) -> str:
        return shlex.join(["python", RUNNER, str(self.mock_examples), "--config", self.config,
                           "--workdir", self.workdir, *COMMON, *self.overrides])

    def batch_shape(self) -> str:
        """One GPU's share of the phase's batch, e.g. '128 x 128 tokens'."""
        phase = self.recipe_phase
        return f"{phase.batch // TARGETS[0].devices} x {phase.length}"

    def resolved_config(self) -> ml_collections.ConfigDict:
        """The config the command runs (its overrides applied), without running it."""
        config = load_config_file(self.config)
        for item in (*COMMON, *self.overrides):
            key, _, raw = item.removeprefix("--config.").partition("=")
            apply_override(config, key, raw)
        return config


def _options(config: str) -> dict[str, str]:
    """'FILE:a=1,b' -> {'a': '1', 'b': ''}."""
    arg = config.partition(":")[2]
    return dict(item.partition("=")[::2] for item in arg.split(",") if item)


def _runs() -> tuple[RecipeRun, ...]:
    """One run per phase of each recipe, in RECIPES' order (ViT's fine-tuning after the run it
    starts from)."""
    out, node = [], TARGETS[0]
    for recipe in RECIPES:
        file = recipe.config.partition(":")[0]
        short, examples, extra = TASKS[file]
        options, arg = _options(recipe.config), recipe.config
        config = load_config_file(arg)
        if short == "vit":
            slug = "vit_b16_384" if options.get("stage") == "finetune" else "vit_b16"
        else:
            slug = f"{short}_{options['size']}"
        if "init" in options:  # fine-tuning: from this module's from-scratch run
            scratch = next(run for run in out if run.name == "gpu_recipe_vit_b16")
            arg = arg.replace(f"init={options['init']}", f"init={scratch.workdir}")
        for index, phase in enumerate(phases(config)):
            if phase.batch % node.devices:
                raise ValueError(f"{recipe.name}: a global batch of {phase.batch} does not split "
                                 f"over {node.devices} GPUs")
            batch = [f"--config.data.batch_size={phase.batch // node.devices}"]
            name = f"gpu_recipe_{slug}"
            if short == "bert":
                data = config.data
                length, predictions = ((data.max_seq_length, data.max_predictions) if index == 0
                                       else (data.phase2_max_seq_length,
                                             data.phase2_max_predictions))
                batch += [f"--config.data.max_seq_length={length}",
                          f"--config.data.max_predictions={predictions}"]
                name += f"_{length}"
            out.append(RecipeRun(name, recipe, index, phase, arg, examples, (*extra, *batch)))
    return tuple(out)


RUNS = _runs()


# ---- the table -------------------------------------------------------------------------------
def measured(run: RecipeRun, record: dict) -> dict:
    """What `record` (of `run`) measured: the device, the step time, MFU and fraction of the
    time spent waiting for batches of the last log window, the device memory at its peak
    (bytes, or None where the backend tracks none)."""
    machine = record["machine"]
    kind = machine["device_kind"]
    peak = flops.spec_peak_flops(kind)
    if peak is None:
        raise ValueError(f"{run.name} ran on {kind!r}, which has no data-sheet bf16 peak in "
                         "train/flops.py: its MFU cannot be computed; add the peak there")
    if machine["device_count"] != 1:
        raise ValueError(f"{run.name} ran on {machine['device_count']} devices; its command "
                         "gives one GPU's batch to one device: run it where one device is visible")
    if record["command"] != shlex.split(run.command):  # as tests/scripts/recipe_run.py names it
        raise ValueError(f"the record {run.name} was made by another command than the run's "
                         f"({shlex.join(record['command'])}): make it again with "
                         "`python -m benchmarks.gpu_recipes`")
    (phase,) = phases(ml_collections.ConfigDict(record["config"]))  # as it ran: its vocabulary
    train = record["metrics"]["train"]
    step = 1.0 / train["steps_per_second"]
    memory = [d["peak_bytes_in_use"] for d in machine["device_memory"] or []]
    return {"device": kind, "step_s": step, "mfu": phase.flops_per_step / step / peak,
            "input_wait": train["input_wait_fraction"],
            "peak_bytes": max(memory) if memory else None}


def table(records) -> str:
    """Each run of RUNS: its phase and batch on one GPU, what its record measured, and the
    recipe phase's steps at that step time (the phase on 8 such GPUs, the all-reduce hidden);
    a recipe's total on its last row once all its phases are recorded. `records.get(name)`
    gives a record or None (train/result_tables.Records)."""
    node = TARGETS[0]
    lines = ["| recipe | phase on one GPU | record | device | step | MFU | waiting for input | "
             "device memory at peak | the phase's steps at this step | the recipe on "
             f"{node.devices} such GPUs |", "|---|---|---|---|---|---|---|---|---|---|"]
    for recipe in RECIPES:
        runs = [run for run in RUNS if run.recipe == recipe]
        total = 0.0
        for run in runs:
            phase, shape = run.recipe_phase, run.batch_shape()
            record = records.get(run.name)
            if record is None:
                total = None
                lines.append(f"| {recipe.name} | {shape} | `{run.name}`: not recorded yet | "
                             "- | - | - | - | - | - | - |")
                continue
            got = measured(run, record)
            seconds = phase.steps * got["step_s"]
            total = None if total is None else total + seconds
            memory = "-" if got["peak_bytes"] is None else f"{got['peak_bytes'] / 2**30:.1f} GiB"
            last = run is runs[-1] and total is not None
            lines.append(f"| {recipe.name} | {shape} | `{run.name}` | {got['device']} | "
                         f"{duration(got['step_s'])} | {got['mfu']:.1%} | "
                         f"{got['input_wait']:.0%} | {memory} | "
                         f"{phase.steps:,} x {duration(got['step_s'])} = {duration(seconds)} | "
                         f"{duration(total) if last else '-'} |")
    return "\n".join(lines)


def settings() -> str:
    """The runs' overrides of their recipes' configs (module docstring), from their commands."""
    def listed(overrides) -> str:
        return ", ".join(f"`{item.removeprefix('--config.')}`" for item in overrides)

    tasks = "; ".join(f"`{file}` ({examples:,} mock examples a split): {listed(overrides)}"
                      for file, (_, examples, overrides) in TASKS.items())
    return (f"Each run overrides its recipe's config with {listed(COMMON)} and one of "
            f"{TARGETS[0].devices} GPUs' share of the batch; and by config file, {tasks}.")
