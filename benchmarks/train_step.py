"""python -m benchmarks.train_step --model bert --size base --seq 128 --batch 8

Times the compiled train step of our BERT or ViT side by side with Hugging Face transformers'
Flax models (``benchmarks.peers``) in the same process, and prints examples/s, tokens/s, model
TFLOPs per step and MFU:

  python -m benchmarks.train_step --model bert --size base --seq 128 --batch 8
  python -m benchmarks.train_step --model bert --size large --seq 512 --batch 4 --dtype bfloat16
  python -m benchmarks.train_step --model bert --size large --seq 512 --batch 32 \
      --dtype bfloat16 --attention auto --attention_dropout 0          # on a GPU
  python -m benchmarks.train_step --model vit --size B/16 --batch 8 --json out.json --markdown out.md

What is timed is what the trainer runs: ``train.trainer.make_train_step`` around the task's
``loss_fn`` (``train/tasks/bert_pretrain.py``: MLM + NSP; ``train/tasks/classify.py``:
cross-entropy), with the config file's optax chain (``configs/bert/pretrain.py:size=...``:
AdamW, clipping, linear schedule; ``configs/vit/fashion_mnist.py:size=...`` at ImageNet shapes),
``jax.jit`` with the state donated, on one device. The peer runs through the same step, task,
loss and optimizer with its model swapped in, on the same batch, dtype and dropout; only the
model differs. ``--attention`` picks our attention kernel (``models/attention.py``: 'xla'
einsums, 'cudnn' fused flash attention, 'auto' cuDNN where it can run); cuDNN's kernel has no
attention-probability dropout, so GPU runs with it set ``--attention_dropout 0`` (both
libraries; the peer always runs its own XLA attention). Where dropout is on, the two do not
draw the same random bits: the peer's attention dropout is one [1, 1, l, l] mask shared by the
batch and the heads (``broadcast_dropout=True``), ours a mask per example and head, as in the
papers; our ViT MLP also drops its hidden units (ViT's MlpBlock), the peer's does not (ViT
runs default to dropout 0). ``--dropout 0 --attention_dropout 0`` makes the work identical. Rows:

  BERT  ours          MLM head at ``--num_predictions`` gathered positions (BERT's 20 at 128,
                      80 at 512), what ``configs/bert/pretrain.py`` trains
        ours (head on every position)   the same step with our model's head run on every
                      position (``mlm_logits_all_positions``) and read at the masked ones, as the
                      peer does: the same loss and the peer's work ("equal work"; with the
                      peer, or ``--equal_work``)
        transformers  ``FlaxBertForPreTraining``: logits at every position, loss at the masked
  ViT   ours, transformers (``FlaxViTForImageClassification``)

Timing: every step is compiled first (compile time reported apart) and run once; then
``--repeats`` rounds run ``--steps`` steps of each contender in turn (the order reversed every
other round, so drift in a shared machine's load hits all alike); a round's time per step is its
wall time / steps, and the table shows each contender's median over rounds and the spread of its
rounds (slowest / fastest: above 1.15 the table warns that the machine's load changed). Ratios
are the medians over rounds of the peer's time over ours in the same round (pairs that share
their moment's load), with their range.

FLOPs are ``train.flops`` (6 x matmul parameters x tokens plus attention, the MLM head only where
it is computed). MFU = FLOPs per step / time per step / peak. The peak: on a GPU or TPU, the
device's bf16 data-sheet peak (``train.flops.data_sheet_peak``) for bf16 runs; otherwise (CPU,
or fp32) square matmuls measured in this run, before the first round and after every round
(``train.flops.measure_matmul_peak``, in the run's dtype), each round's MFU against the better of
the two probes around it and the table's MFU the median over rounds; ``--peak_tflops``
overrides. Each row also says its compiled step's memory (XLA's buffer assignment: parameters,
optimizer state, batch, activations; not the process's peak, which holds every contender) and
the attention kernel its compiled step calls ('cudnn' where the lowered step holds cuDNN's
fused-attention call, else 'xla'), which is what ``--attention auto`` resolved to.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.outputs import benchmark_record, run_command
from benchmarks.profile import markdown as profile_markdown
from benchmarks.profile import profile_contender
from benchmarks.report import OURS_EVERY_POSITION, make_report, markdown, round_peaks
from benchmarks.setups import Setup, bert_setup, default_num_predictions, vit_setup
from models.attention import IMPLEMENTATIONS
from models.sizes import BERT_SIZES, VIT_SIZES
from train import flops, partitioning
from train.trainer import TrainState, make_train_step

MODELS = ("bert", "vit")
PEERS = ("transformers", "none")
DTYPES = ("float32", "bfloat16")
REMATS = ("none", "minimal", "full")
PRNGS = ("threefry2x32", "rbg", "unsafe_rbg")  # jax_default_prng_impl
# Options one model reads, with their defaults: refused for the other model.
MODEL_OPTIONS = {"bert": {"seq": 128, "num_predictions": 0, "equal_work": False},
                 "vit": {"image_size": 224}}


@dataclasses.dataclass
class Contender:
    """One compiled train step and what it is measured against."""

    label: str
    library: str                 # 'ours' | 'transformers'
    step: Callable               # compiled (state, batch) -> (state, metrics)
    state: Any
    batch: dict
    flops_per_example: float
    num_params: int
    compile_seconds: float
    first_loss: float = float("nan")
    times: list = dataclasses.field(default_factory=list)
    memory_bytes: int | None = None  # the compiled step's buffers (`step_memory`)
    attention_ran: str = "xla"       # the kernel the compiled step calls (`attention_kernel`)

    def run(self, steps: int) -> float:
        """Wall seconds per step over `steps` steps, waiting for the last one."""
        start = time.perf_counter()
        for _ in range(steps):
            self.state, metrics = self.step(self.state, self.batch)
        jax.block_until_ready((self.state, metrics))
        return (time.perf_counter() - start) / steps


# --------------------------------------------------------------------------- compile and time


def _num_params(params) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))


def _init_state(init_params, optimizer, seed: int) -> TrainState:
    """The trainer's initial state (train/trainer.py), its parameters from `init_params`."""
    def init(rng):
        params_rng, dropout_rng = jax.random.split(rng)
        params = init_params(params_rng)
        return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                          opt_state=optimizer.init(params), rng=dropout_rng)
    return jax.jit(init)(jax.random.PRNGKey(seed))


CUDNN_ATTENTION_CALL = "__cudnn$fmha"  # the prefix of jax's cuDNN fused-attention custom calls


def attention_kernel(lowered_text: str) -> str:
    """'cudnn' where a lowered step calls cuDNN's fused attention, else 'xla'."""
    return "cudnn" if CUDNN_ATTENTION_CALL in lowered_text else "xla"


def step_memory(compiled) -> int | None:
    """Bytes a compiled step's buffers take on its device (XLA's memory analysis: arguments,
    outputs and temporaries, donated buffers once); None where the backend reports none."""
    stats = compiled.memory_analysis()
    if stats is None:
        return None
    total = stats.peak_memory_in_bytes or (
        stats.argument_size_in_bytes + stats.output_size_in_bytes
        - stats.alias_size_in_bytes + stats.temp_size_in_bytes)
    return int(total) or None


def _compile(label, library, task, setup: Setup, init_params, batch, flops_per_example, seed):
    state = _init_state(init_params, setup.optimizer, seed)
    step_fn = make_train_step(task, setup.optimizer, setup.schedule, setup.config.train)
    batch = jax.device_put({k: jnp.asarray(v) for k, v in batch.items()})
    start = time.perf_counter()
    lowered = jax.jit(step_fn, donate_argnums=0).lower(state, batch)
    step = lowered.compile()
    compile_seconds = time.perf_counter() - start
    contender = Contender(label, library, step, state, batch, flops_per_example,
                          _num_params(state.params), compile_seconds,
                          memory_bytes=step_memory(step),
                          attention_ran=attention_kernel(lowered.as_text()))
    contender.state, metrics = step(contender.state, batch)  # first run: allocation, warm caches
    loss_sum, loss_count = jax.device_get(metrics["loss"])
    contender.first_loss = float(loss_sum / loss_count)
    return contender


def _with_model(task, model):
    """The same task (loss, metrics, step) with `model` answering its ``model.apply``."""
    task = copy.copy(task)
    task.model = model
    return task


def build_contenders(setup: Setup, seed: int) -> list[Contender]:
    task = setup.task
    ours_params = lambda rng: nn.meta.unbox(  # noqa: E731
        task.init_variables(rng, task.dummy_inputs(1))["params"])
    ours_flops = task.flops_per_example()
    contenders = [_compile("ours", "ours", task, setup, ours_params, setup.batch, ours_flops,
                           seed)]
    if setup.equal_work is not None:
        model, equal_flops = setup.equal_work
        contenders.append(_compile(OURS_EVERY_POSITION, "ours", _with_model(task, model), setup,
                                   ours_params, setup.batch, equal_flops, seed))
    if setup.peer_model is not None:
        # The same task (loss, metrics) with the peer's model answering its `model.apply`.
        peer_task = _with_model(task, setup.peer_model)
        peer_flops = ours_flops if setup.equal_work is None else setup.equal_work[1]
        contenders.append(_compile(f"transformers {_transformers_version()}", "transformers",
                                   peer_task, setup, setup.peer_model.init_params, setup.batch,
                                   peer_flops, seed))
    return contenders


def _transformers_version() -> str:
    from benchmarks.peers import import_transformers
    return import_transformers().__version__


def measured_peak(dtype: str) -> float:
    return flops.measure_matmul_peak(dtype=jnp.dtype(dtype))


def time_rounds(contenders: list[Contender], *, steps: int, repeats: int,
                peak_probe: Callable[[], float] | None) -> list[float]:
    """Runs `repeats` rounds of `steps` steps per contender, alternating the order; returns the
    peaks probed before the first round and after each round (empty without a probe)."""
    peaks = [peak_probe()] if peak_probe else []
    for round_index in range(repeats):
        order = contenders if round_index % 2 == 0 else contenders[::-1]
        for contender in order:
            contender.times.append(contender.run(steps))
        if peak_probe:
            peaks.append(peak_probe())
    return peaks


# ------------------------------------------------------------------------------------ report


def peak_for(dtype: str, given_tflops: float = 0.0) -> tuple[float | None, str]:
    """(peak FLOP/s, where it comes from) for a step computing in `dtype`: `given_tflops`, a
    GPU's or TPU's bf16 data sheet, else None: measured around each round (`measured_peak`)."""
    if given_tflops:
        return given_tflops * 1e12, "given (--peak_tflops)"
    device = jax.devices()[0]
    if device.platform in ("gpu", "tpu") and dtype == "bfloat16":
        peak = flops.data_sheet_peak(device, dtype)
        if peak is None:
            raise SystemExit(f"no bf16 data-sheet peak is known for {device.device_kind!r}; "
                             "pass --peak_tflops")
        return peak, f"{device.device_kind} dense bf16 data sheet"
    return None, f"{dtype} 2048^3 matmuls measured around each round"


def report_for(args, setup: Setup, contenders: list[Contender], peaks: list[float],
               peak_source: str) -> dict:
    """``benchmarks.report.make_report`` with this run's shape description."""
    if args.model == "bert":
        predictions = args.num_predictions or default_num_predictions(args.seq)
        shape = f"seq {args.seq}, {predictions} predictions"
    else:
        shape = f"{args.image_size}x{args.image_size}, {setup.tokens_per_example} tokens"
    cfg = setup.task.model_config
    return make_report(args, contenders, tokens_per_example=setup.tokens_per_example,
                       shape=shape, dropout=cfg.dropout_rate,
                       attention_dropout=cfg.attention_dropout_rate,
                       attention=cfg.attention_implementation, peaks=peaks,
                       peak_source=peak_source)


# --------------------------------------------------------------------------------------- CLI


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.train_step", description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=MODELS, required=True)
    parser.add_argument("--size", required=True,
                        help=f"BERT: {'|'.join(BERT_SIZES)}; ViT: {'|'.join(VIT_SIZES)} with "
                             "the patch, e.g. B/16")
    parser.add_argument("--batch", type=int, default=8, help="examples per step")
    parser.add_argument("--seq", type=int, default=None,
                        help=f"BERT: tokens per example (default {MODEL_OPTIONS['bert']['seq']})")
    parser.add_argument("--num_predictions", type=int, default=None,
                        help="BERT: predicted positions per example (0, the default: 20 at 128, "
                             "80 at 512, else 15%% rounded up)")
    parser.add_argument("--image_size", type=int, default=None,
                        help=f"ViT: square image side (default "
                             f"{MODEL_OPTIONS['vit']['image_size']})")
    parser.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="compute dtype of both libraries (parameters stay float32)")
    parser.add_argument("--remat", choices=REMATS, default="none",
                        help="rematerialisation of our layers (models/stack.py)")
    parser.add_argument("--dropout", type=float, default=None,
                        help="dropout of both libraries (default: BERT 0.1, ViT 0.0)")
    parser.add_argument("--attention_dropout", type=float, default=None,
                        help="attention-probability dropout of both libraries (default: "
                             "--dropout's; 'cudnn' attention needs 0)")
    parser.add_argument("--attention", choices=IMPLEMENTATIONS, default="xla",
                        help="our attention kernel: 'xla' einsums, 'cudnn' fused (NVIDIA GPU, "
                             "bf16, no attention dropout), 'auto' cudnn where it can run")
    parser.add_argument("--prng", choices=PRNGS, default=None,
                        help="jax's random-bit generator for the dropout masks (default: jax's, "
                             "threefry2x32 unless JAX_DEFAULT_PRNG_IMPL says otherwise; 'rbg' "
                             "and 'unsafe_rbg' cost less arithmetic on GPUs)")
    parser.add_argument("--peer", choices=PEERS, default="transformers",
                        help="'none' times ours only (no transformers needed)")
    parser.add_argument("--equal_work", action="store_true",
                        help="BERT: also time ours with the MLM head on every position (always "
                             "with a peer, whose work it is)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (alternating contenders)")
    parser.add_argument("--peak_tflops", type=float, default=0.0,
                        help="peak TFLOP/s for MFU (0: data sheet on GPU bf16, else measured)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="",
                        help="also write the run record (train/run_record.py: the report as "
                             "its metrics, the machine, the code version) as JSON here")
    parser.add_argument("--markdown", default="", help="also write the table as Markdown here")
    parser.add_argument("--profile", default="",
                        help="after timing, trace --steps more steps of each contender into "
                             "this directory and print where the time goes by op kind "
                             "(benchmarks/profile.py)")
    args = parser.parse_args(argv)
    for model, options in MODEL_OPTIONS.items():
        for name, default in options.items():
            given = getattr(args, name) is not None and getattr(args, name) is not False
            if model != args.model and given:
                parser.error(f"--{name} is a {model.upper()} option; --model {args.model} does "
                             "not read it")
            if model == args.model and not given:
                setattr(args, name, default)
    for name in ("batch", "steps", "repeats", *(("image_size",) if args.model == "vit" else ())):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.peak_tflops < 0:
        parser.error("--peak_tflops must be >= 0 (0: data sheet on GPU bf16, else measured)")
    for name in ("dropout", "attention_dropout"):
        value = getattr(args, name)
        if value is not None and not 0.0 <= value < 1.0:
            parser.error(f"--{name} must be in [0, 1)")
    return args


def run(args) -> dict:
    """The report of one benchmark, with --prng in effect while it runs (jax's default again
    after it, for a process that goes on, such as the tests)."""
    before = jax.config.jax_default_prng_impl
    if args.prng:  # before any key is made; the report reads back what is in effect
        jax.config.update("jax_default_prng_impl", args.prng)
    try:
        return _run(args)
    finally:
        jax.config.update("jax_default_prng_impl", before)


def _run(args) -> dict:
    peak, peak_source = peak_for(args.dtype, args.peak_tflops)
    with tempfile.TemporaryDirectory() as workdir:
        setup = (bert_setup if args.model == "bert" else vit_setup)(args, workdir)
    mesh = partitioning.make_mesh(setup.config.mesh, devices=jax.devices()[:1])
    # As the trainer traces its step: the mesh and logical-axis rules in scope.
    with contextlib.ExitStack() as stack:
        stack.enter_context(jax.set_mesh(mesh))
        stack.enter_context(nn.logical_axis_rules(partitioning.LOGICAL_RULES))
        contenders = build_contenders(setup, args.seed)
        probe = None if peak is not None else (lambda: measured_peak(args.dtype))
        peaks = time_rounds(contenders, steps=args.steps, repeats=args.repeats, peak_probe=probe)
        profiles = {c.label: profile_contender(c, args.steps, Path(args.profile) / f"contender_{i}")
                    for i, c in enumerate(contenders)} if args.profile else None
    report = report_for(args, setup, contenders, round_peaks(peak, peaks, args.repeats),
                        peak_source)
    if profiles:
        report["profile"] = profiles
    return report


def record(args, report: dict, command: list[str], started: float) -> dict:
    """The run record (train/run_record.py) of a benchmark: its report as the metrics, with the
    Markdown table the docs show (`python -m train.tables` copies it from the record)."""
    return benchmark_record(args, report, markdown(report), command, started,
                            peak=report["peak_tflops"] * 1e12, peak_source=report["peak_source"],
                            leave_out=("profile", *other_models_options(args.model)))


def other_models_options(model: str) -> tuple[str, ...]:
    """The options of the models other than `model` (not read, not recorded)."""
    return tuple(name for other, options in MODEL_OPTIONS.items() if other != model
                 for name in options)


def _table(report: dict) -> str:
    """The report's table, and the profile's when --profile traced one."""
    table = markdown(report)
    if "profile" in report:
        table += "\n\n" + profile_markdown(report["profile"])
    return table


def main(argv=None) -> dict:
    return run_command("benchmarks.train_step", argv, parse_args=parse_args, run=run, table=_table,
                       record=record)


if __name__ == "__main__":
    main(sys.argv[1:])
