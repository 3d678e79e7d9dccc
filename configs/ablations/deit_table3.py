"""python -m train.sweep --config configs/ablations/deit_table3.py --workdir workdirs/deit_table3

DeiT Table 3 (Touvron et al. 2021, Sec. 5.2, "Distillation"): a ViT trained on the labels
alone, with the usual (soft) distillation, with hard distillation, and with hard distillation
through the distillation token (DeiT-alembic), whose class head, distillation head and averaged
heads are the table's last three rows (`class_accuracy`, `distill_accuracy`, `accuracy`). The
teacher's own accuracy (Table 3's teacher, Table 2's "acc.") is the `teacher_accuracy` column.
The paper: ImageNet top-1 of DeiT-B at 224 px with a RegNetY-16GF teacher (82.9%): 81.8 without
distillation, 81.8 with the usual distillation, 83.0 with hard distillation, 83.0 / 83.1 / 83.4
for the token's class head / distillation head / both.

Here the student is configs/vit/deit.py's ViT on Fashion-MNIST (no DeiT recipe: the rows differ
only by their distillation), and the teacher the convnet of configs/vit/convnet_teacher.py,
trained once before the sweep (`python -m train --config configs/vit/convnet_teacher.py
--workdir workdirs/convnet_teacher`; every seed of every row reads it). Its findings
(`FINDINGS`) are judged from the runs as train/findings.py judges every sweep's, paired by seed.

Budget (2-core CPU). The ViT's training costs 75 MFLOPs an image (train/flops.py), so the demo's
5900 steps of 128 images are 57 TFLOPs, about 17 minutes of one core at the ~56 GFLOP/s the ViT
Table 8 sweep sustained (configs/ablations/mae_stages.py); the teacher's forward pass in every
step costs about one more ViT step (measured: the convnet's training step is about 3 ViT
steps). So each row runs STEPS = 1800 steps (3.8 epochs; the schedule's warmup stays 300 and
its cosine decays to the last step): estimated at 10 minutes a run on one core, measured 11 to
12 (the recorded sweep's wall times), so 12 runs (4 rows x 3 seeds) take 70 minutes as two
one-core processes with disjoint `--rows`. The teacher's own run (its config's 5900 steps,
about 3 ViT steps each) took 52 minutes of one core, once.

Variants (`:arg`, comma-separated):
  teacher=workdirs/convnet_teacher   the teacher's workdir (a ViT's for Table 2's comparison)
  steps=N      train steps of each row (default 1800; the ViT demo's are 5900)
  smoke        seconds-long runs on the fixture, 2 seeds, for tests
"""

from __future__ import annotations

from pathlib import Path

from configs import common
from train.sweep_spec import Finding, Metric, Stage, Sweep

DEIT = "configs/vit/deit.py"
ROWS = {"none": "distill=none,token=false", "soft": "distill=soft,token=false",
        "hard": "distill=hard,token=false", "hard_token": "distill=hard,token=true"}
# DeiT Table 3, DeiT-B (224 px), ImageNet top-1 %, teacher RegNetY-16GF (82.9%). The token's
# row has three: its class head, its distillation head and both averaged. The first and last
# (81.8, 83.4) are also the authors' released DeiT-base and DeiT-base distilled checkpoints'
# accuracies (their model zoo); 82.9 is the teacher accuracy the paper states with its teachers.
PAPER = {"none": {"accuracy": 81.8}, "soft": {"accuracy": 81.8}, "hard": {"accuracy": 83.0},
         "hard_token": {"class_accuracy": 83.0, "distill_accuracy": 83.1, "accuracy": 83.4}}
PAPER_TEACHER = 82.9
STEPS = 1800  # each row's train steps: the budget above


def _paper(row: str, metric: str, against: str, against_metric: str = "accuracy") -> str:
    """'top-1 83.0 vs 81.8 (+1.2)': two of Table 3's numbers."""
    ours, base = PAPER[row][metric], PAPER[against][against_metric]
    return f"ImageNet top-1 {ours:.1f} vs {base:.1f} ({ours - base:+.1f})"


# Sec. 5.2: "hard distillation significantly outperforms soft distillation for transformers,
# even when using only a class token"; the distillation token does better than the class token
# alone; the two heads combined do better than either.
FINDINGS = (
    Finding("Hard distillation makes the student better than the labels alone",
            metric="accuracy", row="hard", against="none", expect="higher",
            paper=_paper("hard", "accuracy", "none"),
            if_not="3.8 epochs bound the student, not its labels: at the end it fits its "
                   "training images (89%) little better than the test images (87%) and worse "
                   "than the teacher does the test images (90.8%), so a teacher has little "
                   "over-fitting to correct"),
    Finding("Hard distillation beats the usual (soft) distillation", metric="accuracy",
            row="hard", against="soft", expect="higher", paper=_paper("hard", "accuracy", "soft"),
            if_not="a teacher whose soft labels carry more on 10 classes than on ImageNet's 1000"),
    Finding("Hard distillation through the distillation token beats it into the class token "
            "alone", metric="accuracy", row="hard_token", against="hard", expect="higher",
            paper=_paper("hard_token", "accuracy", "hard"),
            if_not="the same budget bound: a second token does not make the student fit its "
                   "training images better (88.9% against 89.1% with the class token alone)"),
    Finding("The averaged heads beat the distillation token's class head alone",
            metric="accuracy", row="hard_token", against="hard_token",
            against_metric="class_accuracy", expect="higher",
            paper=_paper("hard_token", "accuracy", "hard_token", "class_accuracy"),
            if_not="the two heads of so short a training nearly agree (87.24% and 87.08%), so "
                   "their average has little to add, and the weaker head pulls it down"),
    Finding("The distilled student outperforms its convnet teacher", metric="accuracy",
            row="hard_token", against="hard_token", against_metric="teacher_accuracy",
            expect="higher",
            paper=f"ImageNet top-1 {PAPER['hard_token']['accuracy']:.1f} vs the teacher's "
                  f"{PAPER_TEACHER:.1f} ({PAPER['hard_token']['accuracy'] - PAPER_TEACHER:+.1f})",
            if_not="a 4-epoch student against a 13-epoch convnet that suits 28 x 28 images; "
                   "DeiT's students train 300 epochs with the full recipe"),
)


def get_sweep(arg: str | None = None) -> Sweep:
    args = common.parse_arg(arg, teacher="workdirs/convnet_teacher", steps=STEPS, smoke=False)
    if args.steps < 1:
        raise ValueError(f"steps={args.steps} must be >= 1 (default {STEPS})")
    teacher = args.teacher if "://" in args.teacher else str(Path(args.teacher).absolute())
    variant = f"teacher={teacher}" + (",smoke" if args.smoke else "") + (
        f",steps={args.steps}" if not args.smoke or args.steps != STEPS else "")
    quiet = {"train.progress_bar": False, "train.eval_every": 0}
    return Sweep(
        title="DeiT Table 3: no distillation, soft, hard, hard with the distillation token "
              f"(Fashion-MNIST, convnet teacher){', smoke' if args.smoke else ''}",
        stages=(Stage("deit", f"{DEIT}:{variant}", quiet),),
        rows=dict(ROWS),
        metrics=(Metric("accuracy", "max"), Metric("class_accuracy", "max"),
                 Metric("distill_accuracy", "max"), Metric("teacher_accuracy", "max")),
        seeds=2 if args.smoke else 3,
        paper={row: {k: v / 100 for k, v in values.items()} for row, values in PAPER.items()},
        paper_note="ImageNet top-1 of DeiT-B (224 px) with a RegNetY-16GF teacher (82.9%), "
                   "Table 3; ours are Fashion-MNIST test accuracies of a 5-layer ViT and a "
                   "small convnet teacher, so compare the rows' order, not the values.",
        findings=FINDINGS,
    )
