"""The benchmark's setups (``benchmarks.train_step``): for BERT and ViT, the task, its config's
optax chain and a batch shaped like the data pipeline's, plus what the peer and the equal-work row
need. The step, loss and optimizer are the trainer's (``train/``); only the inputs are made here.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from pathlib import Path
from typing import Any

import numpy as np

from models.cudnn_attention import cudnn_attention_blocker, even_lengths
from models.bert_pretraining import gather_positions
from models.sizes import BERT_SIZES, VIT_SIZES
from train import flops
from train.config import ConfigError
from train.optimizers import make_optimizer

# BERT's max_predictions_per_seq for its two pretraining lengths (Devlin et al. 2019, App. A.2
# via the reference create_pretraining_data.py settings: 20 at 128 tokens, 80 at 512).
BERT_MAX_PREDICTIONS = {128: 20, 512: 80}
MASKING_RATE = 0.15  # BERT: 15% of the tokens are predicted (Sec. 3.1)
BERT_VOCAB_SIZE = 30522  # BERT's uncased English WordPiece vocabulary, for every size
IMAGENET_CLASSES = 1000
CHANNELS = 3


def default_num_predictions(seq_length: int) -> int:
    """BERT's max_predictions for 128 and 512 tokens; else 15% of the tokens, rounded up."""
    return BERT_MAX_PREDICTIONS.get(seq_length, math.ceil(MASKING_RATE * seq_length))


def _config(module: str, arg: str):
    return importlib.import_module(module).get_config(arg)


def _optimizer(config, d_model: int):
    """The config's optax chain, as the trainer builds it."""
    return make_optimizer(config.optimizer, d_model=d_model, num_steps=config.train.num_steps)


def _write_vocab(directory: str, vocab_size: int) -> str:
    """A vocab.txt of `vocab_size` tokens (BERT's five special ones first): the task reads its
    vocabulary size and special ids from it; the benchmark's token ids are random anyway."""
    from data.vocab.wordpiece import SPECIAL_TOKENS
    path = Path(directory) / "vocab.txt"
    words = [f"w{i}" for i in range(vocab_size - len(SPECIAL_TOKENS))]
    path.write_text("\n".join([*SPECIAL_TOKENS, *words]) + "\n", encoding="utf-8")
    return str(path)


def bert_batch(rng: np.random.Generator, batch: int, seq_length: int, num_predictions: int,
               vocab_size: int) -> dict[str, np.ndarray]:
    """A full-length pretraining batch as data/pipelines/pretraining.py yields it: two segments,
    every token real, `num_predictions` distinct predicted positions per row (never [CLS])."""
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
    """Images as data/pipelines/images.py yields them (uint8 [b, h, w, c]) with labels and
    mask."""
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


def _check_attention(args, model_config, length: int):
    """``--attention cudnn`` where cuDNN cannot run a training step over ``length`` tokens
    (padded to an even length, as models/attention.py does) stops here, before compiling, with
    why."""
    if args.attention != "cudnn":
        return
    head_dim = model_config.hidden_size // model_config.num_heads
    reason = cudnn_attention_blocker(args.dtype, head_dim, head_dim,
                                     dropout_rate=model_config.attention_dropout_rate,
                                     lengths=even_lengths((length, length), True))
    if reason is not None:
        raise SystemExit(f"--attention cudnn cannot run this benchmark: {reason}. Use "
                         "--attention xla or auto, or change that (--attention_dropout 0, "
                         "--dtype bfloat16, an NVIDIA GPU).")


def equal_work(task, seq_length: int) -> tuple:
    """(our model with the MLM head on every position, its train FLOPs per example)."""
    return (HeadOnEveryPosition(task.model),
            flops.bert_train_flops_per_example(task.model_config, seq_length, seq_length))


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
    _check_attention(args, task.model_config, args.seq)
    optimizer, schedule = _optimizer(config, task.d_model)
    batch = bert_batch(np.random.default_rng(args.seed), args.batch, args.seq, predictions,
                       task.model_config.vocab_size)
    # The equal-work row: for the ratio with the peer, or asked for (it costs a compilation
    # and, in the process's memory, a second model with its optimizer state and logits).
    equal = equal_work(task, args.seq) if args.peer != "none" or args.equal_work else None
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
    try:
        task = ClassificationTask(config)  # checks that the patch size divides the image
    except ConfigError as error:
        raise SystemExit(f"--size {args.size} --image_size {args.image_size}: {error}") from error
    grid_h, grid_w = task.model_config.grid
    tokens = grid_h * grid_w + task.model_config.num_prefix_tokens
    _check_attention(args, task.model_config, tokens)
    optimizer, schedule = _optimizer(config, task.d_model)
    batch = vit_batch(np.random.default_rng(args.seed), args.batch, image_size)
    peer = None
    if args.peer == "transformers":
        from benchmarks.peers import HfViT
        peer = HfViT(task.model_config, CHANNELS)
    return Setup(task, config, optimizer, schedule, batch, tokens, peer)
