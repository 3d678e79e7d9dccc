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
libraries; the peer always runs its own XLA attention). Rows:

  BERT  ours          MLM head at ``--num_predictions`` gathered positions (BERT's 20 at 128,
                      80 at 512), what ``configs/bert/pretrain.py`` trains
        ours (head on every position)   the same step with our model's head run on every
                      position (``mlm_logits_all_positions``) and read at the masked ones, as the
                      peer does: the same loss and the peer's work ("equal work")
        transformers  ``FlaxBertForPreTraining``: logits at every position, loss at the masked
  ViT   ours, transformers (``FlaxViTForImageClassification``)

Timing: every step is compiled first (compile time reported apart) and run once; then
``--repeats`` rounds run ``--steps`` steps of each contender in turn (the order reversed every
other round, so drift in a shared machine's load hits all alike); a round's time per step is its
wall time / steps, and the table shows each contender's median over rounds. Ratios are medians
of the peer's time over ours.

FLOPs are ``train.flops`` (6 x matmul parameters x tokens plus attention, the MLM head only where
it is computed). MFU = FLOPs per step / time per step / peak. The peak: on a GPU, the device's
bf16 data-sheet peak (``train.flops.spec_peak_flops``) for bf16 runs; otherwise (CPU, or fp32)
the best square matmul measured in this run, before the first round and after every round
(``train.flops.measure_matmul_peak``, in the run's dtype); ``--peak_tflops`` overrides.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import importlib
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.profile import markdown as profile_markdown
from benchmarks.profile import profile_contender
from benchmarks.report import OURS_EVERY_POSITION, make_report, markdown
from models.attention import IMPLEMENTATIONS, cudnn_attention_blocker
from models.bert_pretraining import gather_positions
from models.sizes import BERT_SIZES, VIT_SIZES
from train import flops, partitioning
from train.optimizers import make_optimizer
from train.trainer import TrainState, make_train_step

MODELS = ("bert", "vit")
PEERS = ("transformers", "none")
DTYPES = ("float32", "bfloat16")
REMATS = ("none", "minimal", "full")
# BERT's max_predictions_per_seq for its two pretraining lengths (Devlin et al. 2019, App. A.2
# via the reference create_pretraining_data.py settings: 20 at 128 tokens, 80 at 512).
BERT_MAX_PREDICTIONS = {128: 20, 512: 80}
MASKING_RATE = 0.15  # BERT: 15% of the tokens are predicted (Sec. 3.1)
BERT_VOCAB_SIZE = 30522  # BERT's uncased English WordPiece vocabulary, for every size
IMAGENET_CLASSES = 1000
CHANNELS = 3


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

    def run(self, steps: int) -> float:
        """Wall seconds per step over `steps` steps, waiting for the last one."""
        start = time.perf_counter()
        for _ in range(steps):
            self.state, metrics = self.step(self.state, self.batch)
        jax.block_until_ready((self.state, metrics))
        return (time.perf_counter() - start) / steps


# ------------------------------------------------------------------------------ the setups


def default_num_predictions(seq_length: int) -> int:
    """BERT's max_predictions for 128 and 512 tokens; else 15% of the tokens, rounded up."""
    return BERT_MAX_PREDICTIONS.get(seq_length, math.ceil(MASKING_RATE * seq_length))


def _config(module: str, arg: str):
    return importlib.import_module(module).get_config(arg)


def _optimizer(config, d_model: int):
    """The config's optax chain, with total_steps resolved as the trainer does."""
    optimizer_cfg = config.optimizer.copy_and_resolve_references()
    if optimizer_cfg.total_steps == -1:
        optimizer_cfg.total_steps = config.train.num_steps
    return make_optimizer(optimizer_cfg, d_model=d_model)


def _num_params(params) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))


def _write_vocab(directory: str, vocab_size: int) -> str:
    """A vocab.txt of `vocab_size` tokens (BERT's five special ones first): the task reads its
    vocabulary size and special ids from it; the benchmark's token ids are random anyway."""
    from data.wordpiece import SPECIAL_TOKENS
    path = Path(directory) / "vocab.txt"
    words = [f"w{i}" for i in range(vocab_size - len(SPECIAL_TOKENS))]
    path.write_text("\n".join([*SPECIAL_TOKENS, *words]) + "\n", encoding="utf-8")
    return str(path)


def bert_batch(rng: np.random.Generator, batch: int, seq_length: int, num_predictions: int,
               vocab_size: int) -> dict[str, np.ndarray]:
    """A full-length pretraining batch as data/pretraining.py yields it: two segments, every
    token real, `num_predictions` distinct predicted positions per row (never [CLS])."""
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq_length), num_predictions,
                                             replace=False) for _ in range(batch)]), axis=1)
    segment_ids = np.zeros((batch, seq_length), np.int32)
    segment_ids[:, seq_length // 2:] = 1
    return {"input_ids": rng.integers(5, vocab_size, (batch, seq_length), dtype=np.int32),
            "input_mask": np.ones((batch, seq_length), np.int32),
            "segment_ids": segment_ids,
            "masked_positions": positions.astype(np.int32),
            "masked_ids": rng.integers(5, vocab_size, (batch, num_predictions), dtype=np.int32),
            "masked_weights": np.ones((batch, num_predictions), np.float32),
            "next_sentence_label": rng.integers(0, 2, (batch,), dtype=np.int32),
            "mask": np.ones((batch,), np.float32)}


class HeadOnEveryPosition:
    """Our ``BertForPreTraining`` doing the peer's MLM work: the head (transform and the tied
    [H, V] projection) on every position, the loss then reading the logits at
    ``masked_positions`` (a gather, as ``benchmarks.peers.HfBertForPreTraining`` does). The
    parameters, the outputs and so the loss are those of the standard model."""

    def __init__(self, model):
        self.model = model

    def apply(self, variables, input_ids, token_type_ids=None, attention_mask=None, *,
              masked_positions, train: bool = False, rngs=None):
        out = self.model.apply(variables, input_ids, token_type_ids, attention_mask, train=train,
                               rngs=rngs, method="mlm_logits_all_positions")
        return {**out, "mlm_logits": gather_positions(out["mlm_logits"], masked_positions)}


def vit_batch(rng: np.random.Generator, batch: int, image_size: tuple[int, int]
              ) -> dict[str, np.ndarray]:
    """Images as data/images.py yields them (uint8 [b, h, w, c]) with labels and mask."""
    return {"image": rng.integers(0, 256, (batch, *image_size, CHANNELS), dtype=np.uint8),
            "label": rng.integers(0, IMAGENET_CLASSES, (batch,), dtype=np.int32),
            "mask": np.ones((batch,), np.float32)}


@dataclasses.dataclass
class Setup:
    """What the contenders of one model share: the task(s), the optimizer and the batch."""

    task: Any
    config: Any
    optimizer: Any
    schedule: Any
    batch: dict
    tokens_per_example: int
    peer_model: Any = None       # a benchmarks.peers wrapper, or None
    equal_work: tuple | None = None  # (model, flops per example) of ours, head everywhere


def _attention(args, dropout: float) -> dict:
    """The model config's attention kernel and attention dropout (default: ``dropout``)."""
    rate = dropout if args.attention_dropout is None else args.attention_dropout
    return dict(attention_implementation=args.attention, attention_dropout_rate=rate)


def _check_attention(args, model_config):
    """``--attention cudnn`` where cuDNN cannot run stops here, before compiling, with why."""
    if args.attention != "cudnn":
        return
    head_dim = model_config.hidden_size // model_config.num_heads
    reason = cudnn_attention_blocker(args.dtype, head_dim, head_dim,
                                     dropout_rate=model_config.attention_dropout_rate)
    if reason is not None:
        raise SystemExit(f"--attention cudnn cannot run this benchmark: {reason}. Use "
                         "--attention xla or auto, or change that (--attention_dropout 0, "
                         "--dtype bfloat16, an NVIDIA GPU).")


def bert_setup(args, workdir: str) -> Setup:
    from train.tasks.bert_pretrain import BertPretrainingTask

    if args.size not in BERT_SIZES:
        raise SystemExit(f"--size {args.size!r} is not a BERT size; known: {list(BERT_SIZES)}")
    config = _config("configs.bert.pretrain", f"size={args.size}")
    max_positions = config.model.max_position_embeddings
    if not 1 < args.seq <= max_positions:
        raise SystemExit(f"--seq {args.seq}: BERT's position table has "
                         f"max_position_embeddings={max_positions} rows; use 2 <= --seq <= "
                         f"{max_positions}")
    predictions = args.num_predictions or default_num_predictions(args.seq)
    if not 0 < predictions < args.seq:
        raise SystemExit(f"--num_predictions {predictions} must be in [1, --seq - 1 = "
                         f"{args.seq - 1}]")
    config.data.vocab_file = _write_vocab(workdir, BERT_VOCAB_SIZE)
    config.data.update(max_seq_length=args.seq, max_predictions=predictions,
                       batch_size=args.batch)
    dropout = 0.1 if args.dropout is None else args.dropout  # BERT's
    config.model.update(dtype=args.dtype, remat=args.remat, dropout_rate=dropout,
                        **_attention(args, dropout))
    task = BertPretrainingTask(config)
    _check_attention(args, task.model_config)
    optimizer, schedule = _optimizer(config, task.d_model)
    batch = bert_batch(np.random.default_rng(args.seed), args.batch, args.seq, predictions,
                       task.model_config.vocab_size)
    equal = (HeadOnEveryPosition(task.model),
             flops.bert_train_flops_per_example(task.model_config, args.seq, args.seq))
    peer = None
    if args.peer == "transformers":
        from benchmarks.peers import HfBertForPreTraining
        peer = HfBertForPreTraining(task.model_config, args.seq)
    return Setup(task, config, optimizer, schedule, batch, args.seq, peer, equal)


def vit_setup(args, workdir: str) -> Setup:
    from train.tasks.classify import ClassificationTask

    size, _, patch = args.size.partition("/")
    if size not in VIT_SIZES or not patch.isdigit():
        raise SystemExit(f"--size {args.size!r} is not a ViT size with its patch; known sizes "
                         f"{list(VIT_SIZES)}, written like B/16")
    config = _config("configs.vit.fashion_mnist", f"size={args.size}")
    image_size = (args.image_size, args.image_size)
    dropout = 0.0 if args.dropout is None else args.dropout  # ViT/DeiT and HF's ViTConfig
    config.model.update(num_classes=IMAGENET_CLASSES, image_size=image_size, pool="cls",
                        posemb="learned_1d", stem_channels=0, head_hidden_size=0,
                        activation="gelu", dtype=args.dtype, remat=args.remat,
                        dropout_rate=dropout, **_attention(args, dropout))
    config.data.update(image_shape=(*image_size, CHANNELS), batch_size=args.batch)
    task = ClassificationTask(config)  # checks that the patch size divides the image
    _check_attention(args, task.model_config)
    optimizer, schedule = _optimizer(config, task.d_model)
    batch = vit_batch(np.random.default_rng(args.seed), args.batch, image_size)
    grid_h, grid_w = task.model_config.grid
    peer = None
    if args.peer == "transformers":
        from benchmarks.peers import HfViT
        peer = HfViT(task.model_config, CHANNELS)
    return Setup(task, config, optimizer, schedule, batch,
                 grid_h * grid_w + task.model_config.num_prefix_tokens, peer)


# --------------------------------------------------------------------------- compile and time


def _init_state(init_params, optimizer, seed: int) -> TrainState:
    """The trainer's initial state (train/trainer.py), its parameters from `init_params`."""
    def init(rng):
        params_rng, dropout_rng = jax.random.split(rng)
        params = init_params(params_rng)
        return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                          opt_state=optimizer.init(params), rng=dropout_rng)
    return jax.jit(init)(jax.random.PRNGKey(seed))


def _compile(label, library, task, setup: Setup, init_params, batch, flops_per_example, seed):
    state = _init_state(init_params, setup.optimizer, seed)
    step_fn = make_train_step(task, setup.optimizer, setup.schedule, setup.config.train)
    batch = jax.device_put({k: jnp.asarray(v) for k, v in batch.items()})
    start = time.perf_counter()
    step = jax.jit(step_fn, donate_argnums=0).lower(state, batch).compile()
    compile_seconds = time.perf_counter() - start
    contender = Contender(label, library, step, state, batch, flops_per_example,
                          _num_params(state.params), compile_seconds)
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


def peak_flops(args) -> tuple[float | None, str]:
    """(peak FLOP/s, where it comes from); None: to be measured during the run."""
    if args.peak_tflops:
        return args.peak_tflops * 1e12, "given (--peak_tflops)"
    device = jax.devices()[0]
    if device.platform == "gpu" and args.dtype == "bfloat16":
        peak = flops.spec_peak_flops(device.device_kind)
        if peak is None:
            raise SystemExit(f"no bf16 data-sheet peak is known for {device.device_kind!r}; "
                             "pass --peak_tflops")
        return peak, f"{device.device_kind} dense bf16 data sheet"
    return None, f"best {args.dtype} 2048^3 matmul measured in this run"


def report_for(args, setup: Setup, contenders: list[Contender], peak: float,
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
                       attention=cfg.attention_implementation, peak=peak,
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
    parser.add_argument("--seq", type=int, default=128, help="BERT: tokens per example")
    parser.add_argument("--num_predictions", type=int, default=0,
                        help="BERT: predicted positions per example (0: 20 at 128, 80 at 512, "
                             "else 15%% rounded up)")
    parser.add_argument("--image_size", type=int, default=224, help="ViT: square image side")
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
    parser.add_argument("--peer", choices=PEERS, default="transformers",
                        help="'none' times ours only (no transformers needed)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (alternating contenders)")
    parser.add_argument("--peak_tflops", type=float, default=0.0,
                        help="peak TFLOP/s for MFU (0: data sheet on GPU bf16, else measured)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="", help="also write the report as JSON here")
    parser.add_argument("--markdown", default="", help="also write the table as Markdown here")
    parser.add_argument("--profile", default="",
                        help="after timing, trace --steps more steps of each contender into "
                             "this directory and print where the time goes by op kind "
                             "(benchmarks/profile.py)")
    args = parser.parse_args(argv)
    for name in ("batch", "steps", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    for name in ("dropout", "attention_dropout"):
        value = getattr(args, name)
        if value is not None and not 0.0 <= value < 1.0:
            parser.error(f"--{name} must be in [0, 1)")
    return args


def run(args) -> dict:
    peak, peak_source = peak_flops(args)
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
    report = report_for(args, setup, contenders, peak if peak is not None else max(peaks),
                        peak_source)
    if profiles:
        report["profile"] = profiles
    return report


def main(argv=None) -> dict:
    args = parse_args(argv)
    report = run(args)
    table = markdown(report)
    if "profile" in report:
        table += "\n\n" + profile_markdown(report["profile"])
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
