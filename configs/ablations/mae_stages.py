"""The stages the masked-autoencoder sweeps share (configs/ablations/mae_*.py): pretraining with
configs/vit/mae.py, then fine-tuning all weights or a linear probe with configs/vit/fashion_mnist.py
started from the pretraining workdir (its encoder, train/vit_init.py), on a budget sized for the
2-core CPU.

Budget. The paper pretrains ViT-L for 800 epochs of ImageNet; here pretraining is 500 steps of 128
images (about 1.1 epochs of Fashion-MNIST), fine-tuning and the probe 200 steps of 128 labelled
images (0.43 epochs), each with one eval on the 10,000 test images at the end. Pretraining
keeps configs/vit/mae.py's learning rate, 1.5e-3, set at its batch of 256: MAE's rule (App. A.1,
lr = base lr x batch / 256) would halve it at this batch of 128; and its warmup is a tenth of the
steps (the paper's 40 of 800 epochs is a twentieth). The costs, from
the models' FLOPs (train/flops.py) at the rate the ViT Table 8 sweep ran at (about 56 GFLOP/s on
one core of the quiet 2-core machine: 600 steps of 256 images of a model of the same cost per
image in about 4 minutes), with about 40 s a run of start-up, compilation and the eval: a
pretraining run about 2.3 minutes (5 with mask tokens in the encoder), a fine-tuning run 2.7,
a probe 1.5, the one-step `untrained` pretraining 0.6. Each sweep's docstring adds them up;
all three were estimated at about two hours of the 2-core machine, as two processes with
disjoint `--rows` (or `--seeds`). The recorded runs took 380 minutes of one core (their
`wall_s`, two runs side by side: fine-tuning 3.5 to 4 minutes a run), so about 3.2 hours.

`untrained` (as BERT Table 8's sweep has): one pretraining step at learning rate 0, so the
downstream stages start from the encoder at its random initialisation: fine-tuning it is
training the same ViT from scratch with the same budget, probing it is a linear classifier on
random features.
"""

from __future__ import annotations

from configs import common
from train.sweep_spec import Metric, Stage

PRETRAIN = "configs/vit/mae.py"
CLASSIFY = "configs/vit/fashion_mnist.py"
PRETRAIN_STEPS = 500
DOWNSTREAM_STEPS = 200
BATCH = 128
# The reference row without pretraining: one step that changes nothing.
UNTRAINED = {"train.num_steps": 1, "optimizer.warmup_steps": 0, "optimizer.learning_rate": 0.0}
# Training FLOPs of one image in a pretraining step of configs/vit/mae.py (the encoder on the 12
# visible patches of 49, the decoder on all) over those of one fine-tuning step of its encoder
# on all 49: 87.9 / 259.6 MFLOPs (train/flops.py; tests/test_mae_sweeps.py recomputes it).
PRETRAIN_FLOPS_RATIO = 0.339
# The smoke runs' steps, both of 32 images (configs/vit/mae.py:smoke, fashion_mnist.py:smoke;
# a test checks them).
SMOKE_PRETRAIN_STEPS, SMOKE_DOWNSTREAM_STEPS = 12, 20

# probe_and_finetune's metrics: fine-tuned accuracy (the last stage; it ranks the rows), the
# probe's, the pretraining's pixel error.
PROBE_AND_FINETUNE_METRICS = (Metric("accuracy", "max"), Metric("accuracy", "max", stage="probe"),
                              Metric("pixel_mse", "min", stage="pretrain"))

_QUIET = {"train.progress_bar": False, "train.eval_every": 0}  # one eval, at the end


def _arg(config: str, arg: str, smoke: bool) -> str:
    """'FILE:ARG' with ',smoke' added for a smoke sweep."""
    args = ",".join(a for a in (arg, "smoke" if smoke else "") if a)
    return f"{config}:{args}" if args else config


def pretrain(smoke: bool, steps: int = PRETRAIN_STEPS) -> Stage:
    """The pretraining stage; rows change it (a config `:arg` of configs/vit/mae.py, or keys)."""
    if smoke:
        return Stage("pretrain", _arg(PRETRAIN, "", True), dict(_QUIET))
    return Stage("pretrain", _arg(PRETRAIN, f"steps={steps}", False), {
        **_QUIET, "data.batch_size": BATCH, "train.checkpoint_every": max(1, steps // 2)})


def _budget(steps: int) -> dict:
    return {"train.num_steps": steps, "optimizer.warmup_steps": steps // 10,
            "data.batch_size": BATCH, "train.checkpoint_every": steps}


def downstream(name: str, arg: str, smoke: bool, steps: int = DOWNSTREAM_STEPS,
               row_steps: dict[str, int] | None = None) -> Stage:
    """A stage of configs/vit/fashion_mnist.py with `arg` ('' fine-tunes all weights, 'probe',
    'labels=0.01', ...) from the pretraining stage's workdir; rows do not change it, except
    `row_steps`: {row: its own number of steps} (warmup and checkpoints scaled alike)."""
    overrides = dict(_QUIET)
    if not smoke:
        overrides.update(_budget(steps))
    rows = {row: ({"train.num_steps": n} if smoke else _budget(n))
            for row, n in (row_steps or {}).items()}
    return Stage(name, _arg(CLASSIFY, arg, smoke), overrides, apply_rows=False,
                 previous_workdir_key="init", workdir_from="pretrain", row_overrides=rows)


def equal_compute_steps(args) -> int:
    """Fine-tuning steps of a ViT from scratch that cost as much as the MAE pipeline's
    pretraining and fine-tuning together: the fine-tuning's own steps plus the pretraining's
    steps in fine-tuning steps of the same batch, by their FLOPs (PRETRAIN_FLOPS_RATIO; smoke
    runs: the same ratio on their own step counts)."""
    if args.smoke:
        return SMOKE_DOWNSTREAM_STEPS + round(SMOKE_PRETRAIN_STEPS * PRETRAIN_FLOPS_RATIO)
    return DOWNSTREAM_STEPS + round(args.steps * PRETRAIN_FLOPS_RATIO)


def parse(arg: str | None):
    """A MAE sweep's `:arg`: `steps=N` of pretraining (default PRETRAIN_STEPS), `smoke`."""
    args = common.parse_arg(arg, steps=PRETRAIN_STEPS, smoke=False)
    if args.steps < 2:
        raise ValueError(f"steps={args.steps} must be >= 2")
    return args


def probe_and_finetune(args, finetune_steps: dict[str, int] | None = None) -> tuple[Stage, ...]:
    """Pretraining, then a linear probe and fine-tuning of all weights from it (Figure 5's and
    Table 1's two columns), which PROBE_AND_FINETUNE_METRICS report; `finetune_steps`: rows
    whose fine-tuning runs its own number of steps."""
    return (pretrain(args.smoke, args.steps), downstream("probe", "probe", args.smoke),
            downstream("finetune", "", args.smoke, row_steps=finetune_steps))
