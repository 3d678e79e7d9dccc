"""python -m train --config configs/bert/distill.py --workdir workdirs/distil_general

DistilBERT (Sanh et al. 2019): a student with half its teacher's layers, initialised from the
teacher's layers one out of two, learns from the teacher. Two modes:

  mode=general  (the paper's Sec. 3) masked LM on Brown + Austen + SOTU (`python -m data.fetch
                brown austen sotu`) with the triple loss: soft targets of the teacher's MLM
                distribution at temperature T (x T^2), the MLM loss and the cosine loss between
                the last hidden states, weighted 5 / 2 / 1 as the paper's code; dynamic masking,
                no NSP; no segment embeddings, no pooler. Teacher: a configs/bert/pretrain.py
                workdir (default workdirs/bert_pretrain, the headline pretraining run: 4 layers,
                so the student has 2). The distilled student fine-tunes like any pretraining
                run: `configs/bert/finetune.py:task=brown_pos,init=workdirs/distil_general`.
  mode=task     (task-specific distillation: the second step of the paper's "DistilBERT (D)",
                Sec. 4.1, alone; TinyBERT's prediction-layer distillation) a task's
                labelled data with the teacher's soft labels at temperature T (x T^2) plus the
                gold labels, weighted 0.5 / 0.5. Teacher: a configs/bert/finetune.py workdir of
                the same task (default workdirs/finetune_<task>, the headline MiniLM
                fine-tuning runs: 6 layers, so the student has 3); the student keeps the
                teacher's segment embeddings, pooler and classifier (all fine-tuned).

Variants (`:arg`, comma-separated):
  mode=general|task
  task=spam|tweets|brown_genre|brown_pos|squad|swag     (mode=task) the dataset, with
                configs/bert/finetune.py's length, batch and step budget for it
  teacher=PATH|minilm   the teacher's workdir ('' default: as above); minilm (no MLM head) can
                teach mode=general only its hidden states: with drop=ce
  init=teacher|random   the student's start: the teacher's layers 1, 3, 5, ... (one out of two,
                        ending with the last), or random weights (Table 4's last row)
  drop=ce|mlm|cos       (mode=general) leave one term of the triple loss out (Table 4's rows)
  ce_positions=real|masked  (mode=general) soft targets at every real token (the paper's code)
                        or at the masked positions only (4-8x cheaper heads on a CPU)
  steps=0               0: the default budget (general 1,000 steps; task: finetune.py's)
  lr=0                  peak learning rate; 0: general 1e-3, task 1e-4
  smoke                 a seconds-long run for tests (the teacher must exist: tests make one)
Layers other than one out of two: `--config.distill.layers=0,2` (teacher layer indices).
e.g. `...distill.py:mode=task,task=tweets` or `...distill.py:drop=cos,teacher=workdirs/bert`.

The CPU budgets (2-core machine), estimated from the FLOPs of a step (train/flops.py) against
the steps these teachers were measured at: general, the 2-layer student of the 4 x 128 teacher,
2.0x a pretraining step's FLOPs with ce_positions=real (the [V]-wide heads of both models on
every token) and 0.9x with masked, so about 1.1 s and 0.5 s a step at configs/bert/pretrain.py's
1.8 steps/s (1,000 steps: about 18 or 8 minutes; measured with masked, in the records of
configs/ablations/distilbert_table4.py: about 0.9 s a step with start-up and evals); task, the
3-layer student of MiniLM, 0.83x the teacher's fine-tuning step (its forward pass is a third of
that step, the student's step half).
"""

from __future__ import annotations

import ml_collections

from configs import common
from configs.bert import finetune as finetune_config

MODES = ("general", "task")
DROPS = ("", "ce", "mlm", "cos")
GENERAL_TEACHER = "workdirs/bert_pretrain"          # train/headline_runs.py 'bert_pretrain'
TASK_TEACHER = "workdirs/finetune_{task}"           # ... 'finetune_spam', 'finetune_tweets', ...
GENERAL_STEPS, GENERAL_LR, TASK_LR = 1000, 1e-3, 1e-4


def _model(dropout: float) -> ml_collections.ConfigDict:
    """The student's settings that are not dimensions (those are the teacher's)."""
    model = ml_collections.ConfigDict()
    model.name = "bert"                      # models/bert_pretraining.py / bert_heads.py
    model.dropout_rate = dropout
    model.attention_dropout_rate = dropout
    model.attention_implementation = "xla"   # xla | cudnn (GPU) | auto
    model.dtype = "float32"                  # compute dtype
    model.param_dtype = "float32"            # parameter and optimizer-state dtype
    model.remat = "none"                     # none | minimal | full
    model.scan_layers = False                # nn.scan over the layers (models/stack.py)
    return model


def _distill(args, *, teacher: str, segments: bool, pooler: bool, temperature: float):
    distill = ml_collections.ConfigDict()
    distill.teacher = teacher                # 'minilm' or a workdir (train/teacher.py)
    distill.teacher_step = -1                # its checkpoint step; -1: the latest
    distill.teacher_fingerprint = ""         # sha256 of its parameters; "": recorded in
                                             # config.json at the start (a resume must match)
    distill.layers = "every_other"           # teacher layers the student keeps: every_other
                                             # (1, 3, .. ending with the last) or '0,2,4'
    distill.init = args.init                 # teacher: start from those layers | random
    distill.segments = segments              # keep the segment (token-type) embeddings
    distill.pooler = pooler                  # keep the pooler (else pooled = h_[CLS])
    distill.temperature = temperature        # T of the soft targets (loss x T^2)
    return distill


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = common.parse_arg(arg, mode="general", task="", teacher="", init="teacher",
                            drop="", ce_positions="real", steps=0, lr=0.0, smoke=False)
    if args.mode not in MODES:
        raise ValueError(f"mode={args.mode!r} is not one of {list(MODES)}")
    if args.init not in ("teacher", "random"):
        raise ValueError(f"init={args.init!r} is not 'teacher' or 'random'")
    if args.drop not in DROPS:
        raise ValueError(f"drop={args.drop!r} is not one of {list(DROPS[1:])}")
    if args.steps < 0 or args.lr < 0:
        raise ValueError(f"steps={args.steps} and lr={args.lr} must be >= 0 (0: the default)")
    if args.mode == "task" and (args.drop or args.ce_positions != "real"):
        raise ValueError("drop= and ce_positions= are mode=general variants")
    if args.mode == "general" and args.task:
        raise ValueError(f"task={args.task} is a mode=task variant (general distillation reads "
                         "the pretraining corpora): add mode=task, or drop task=")
    args.task = args.task or "spam"
    if args.mode == "general":
        return _general(args)
    return _task(args)


def _general(args) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.seed = 0                          # student init (random parts), dropout, masks
    config.task = ml_collections.ConfigDict()
    config.task.name = "distill_pretrain"    # train/tasks/distill_pretrain.py
    config.model = _model(dropout=0.0)       # as the CPU teacher (configs/bert/pretrain.py)
    config.distill = _distill(args, teacher=args.teacher or GENERAL_TEACHER, segments=False,
                              pooler=False, temperature=2.0)
    config.distill.alpha_ce = 0.0 if args.drop == "ce" else 5.0   # soft targets, T^2 KL
    config.distill.alpha_mlm = 0.0 if args.drop == "mlm" else 2.0  # masked LM
    config.distill.alpha_cos = 0.0 if args.drop == "cos" else 1.0  # cosine of last states
    config.distill.ce_positions = args.ce_positions  # real (paper's code) | masked

    config.data = ml_collections.ConfigDict()
    config.data.names = ("brown", "austen", "sotu")  # python -m data.fetch NAME
    config.data.source = "local"             # local (data/ builders) | tfds (one Wikipedia dump)
    config.data.train_split = "train"
    config.data.eval_split = "validation"
    config.data.shuffle_window = 0           # tfds: examples shuffled together in the stream
                                             # (0 local: the whole corpus is shuffled)
    config.data.worker_count = 0             # tfds: processes making the stream's batches (0: this
                                             # one; data/pipelines/workers.py)
    config.data.input_format = "full_sentences"  # packed sentences, no pairs (no NSP)
    config.data.max_seq_length = 128
    config.data.short_seq_prob = 0.0         # only segment_pair reads it (packed rows are full)
    config.data.dupe_factor = 0              # dynamic masking (the paper, after RoBERTa)
    config.data.select_prob = 0.15
    config.data.mask_prob = 0.8              # 80-10-10, as BERT and DistilBERT
    config.data.random_prob = 0.1
    config.data.keep_prob = 0.1
    config.data.max_predictions = 20
    config.data.whole_word = False
    config.data.batch_size = 32
    config.data.eval_batch_size = 128
    config.data.phase2_fraction = 0.0        # (data/pipelines/phases.py; unused by default)
    config.data.phase2_max_seq_length = 512
    config.data.phase2_max_predictions = 80
    config.data.phase2_batch_size = 32       # global batch of phase 2

    steps = args.steps or GENERAL_STEPS
    config.optimizer = common.optimizer_config(  # AdamW, warmup 10%, linear decay
        name="adamw", schedule="linear", learning_rate=args.lr or GENERAL_LR,
        warmup_steps=max(1, steps // 10), b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01,
        clip_norm=1.0)
    config.train = common.train_config(num_steps=steps, log_every=50, eval_every=0,
                                       checkpoint_every=max(100, steps // 4))
    config.mesh = common.mesh_config()
    if args.smoke:
        config.data.update(names=("brown",), max_seq_length=32, max_predictions=5, batch_size=8,
                           eval_batch_size=16, phase2_max_seq_length=64,
                           phase2_max_predictions=10, phase2_batch_size=4)
        config.optimizer.warmup_steps = 2
        config.train.update(num_steps=args.steps or 8, log_every=4, checkpoint_every=4,
                            keep_checkpoints=2, progress_bar=False)
    return config


def _task(args) -> ml_collections.ConfigDict:
    if args.task not in finetune_config.TASKS:
        raise ValueError(f"task={args.task!r} is not one of {list(finetune_config.TASKS)}")
    settings = finetune_config.SETTINGS[args.task]
    config = ml_collections.ConfigDict()
    config.seed = 0                          # student init (random parts), dropout, data order
    config.task = ml_collections.ConfigDict()
    config.task.name = "distill_finetune"    # train/tasks/distill_finetune.py
    config.task.max_answer_length = 30       # span: longest predicted answer in pieces
    config.model = _model(dropout=0.1)       # fine-tuning's dropout
    config.distill = _distill(args, teacher=args.teacher or TASK_TEACHER.format(task=args.task),
                              segments=True, pooler=True, temperature=2.0)
    config.distill.alpha_ce = 0.5            # the teacher's soft labels, T^2 KL
    config.distill.alpha_gold = 0.5          # the gold labels' cross-entropy

    config.data = ml_collections.ConfigDict()
    config.data.name = args.task             # data/pipelines/finetune_datasets.py
    config.data.source = settings["source"]
    config.data.train_split = "train"
    config.data.eval_split = "validation"    # report 'test' at the end
    config.data.max_seq_length = settings["max_seq_length"]
    config.data.max_query_length = 64        # span: pieces kept of the question
    config.data.batch_size = settings["batch_size"]
    config.data.eval_batch_size = 64

    steps = args.steps or settings["cpu_steps"]  # the teacher's fine-tuning budget
    config.optimizer = common.optimizer_config(  # BERT App. A.3's recipe
        name="adamw", schedule="linear", learning_rate=args.lr or TASK_LR,
        warmup_steps=min(max(1, round(0.1 * steps)), steps - 1) if steps > 1 else 0,
        b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01, clip_norm=1.0)
    config.train = common.train_config(
        num_steps=steps, log_every=max(1, min(50, steps // 10)), eval_every=0,
        checkpoint_every=max(100, steps // 2), keep_checkpoints=1)
    config.mesh = common.mesh_config()
    if args.smoke:
        config.data.update(max_seq_length=32, max_query_length=8, batch_size=8,
                           eval_batch_size=16)
        config.optimizer.update(warmup_steps=2, learning_rate=args.lr or 1e-3)
        config.train.update(num_steps=args.steps or 8, log_every=4, checkpoint_every=4,
                            keep_checkpoints=2, progress_bar=False)
    return config
