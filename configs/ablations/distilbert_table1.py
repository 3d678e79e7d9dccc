"""python -m train.sweep --config configs/ablations/distilbert_table1.py --workdir workdirs/distilbert_table1

DistilBERT's headline claim (Sanh et al. 2019, Tables 1 and 3) at CPU scale: a student with half
its teacher's layers keeps 97% of the teacher's score (GLUE macro-score 77.0 against BERT-base's
79.5) with 40% fewer parameters, 60% faster. Here the teacher is MiniLM fine-tuned on a task and
the student 3 of its 6 layers (every other one, ending with the last), distilled on the same task
from the teacher's soft labels and the gold labels (configs/bert/distill.py:mode=task:
task-specific distillation, as TinyBERT distils and as the second step of the paper's
"DistilBERT (D)" (Sec. 4.1) does after general-purpose distillation; the general-purpose
distillation of the paper needs a pretrained teacher with an MLM head and a corpus this machine
cannot give MiniLM, whose student could then only be fine-tuned). One row per task, its test split:

  spam       ham/spam emails, accuracy                     128 tokens, 100 steps
  tweets     3-class tweet sentiment, accuracy              64 tokens, 240 steps
  brown_pos  Brown part-of-speech tags, token accuracy      64 tokens, 240 steps

Each run evaluates student and teacher on the same test batches: `score` (the task's metric),
`teacher_score`, and `score_of_teacher`, their ratio, the paper's "97%". The finding it tests,
per task: the student's score within 3 points of its teacher's (`_keeps_the_score`, judged by
train/findings.py on the per-seed differences). Every seed's student reads the same teacher, so
the standard error covers the students' seed-to-seed spread only, not the teacher's. The
parameters and the inference speed of both (the paper's 40% fewer, 60% faster) are not a
sweep's: they come from `python -m
benchmarks.distill_speed --task spam` and `--task tweets` (benchmarks.md; headline runs
bench_distil_spam / bench_distil_tweets).

The teachers are the headline fine-tuning runs (train/headline_runs.py finetune_spam,
finetune_tweets, finetune_brown_pos), trained first and read by every seed's student:
  python -m train --config configs/bert/finetune.py:task=spam,init=minilm \\
      --config.data.eval_split=test --workdir workdirs/finetune_spam      (and tweets, brown_pos)
`teachers=DIR` looks for them as DIR/finetune_<task> (default: workdirs). Seed k changes the
student's dropout and data order; its start is the teacher's weights, whatever the seed.

Budget (2-core CPU): a student's step costs about 0.83 of its teacher's fine-tuning step (the
teacher's forward pass is a third of that step, the 3-layer student's step half of it; encoder
FLOPs), with the teacher's step budget (configs/bert/finetune.py: spam 100 x 5.5 s, tweets 240
x 2.4 s, brown_pos 240 x 2.3 s measured beside another job): about 8 minutes of training and
1-2 of evaluation a run, 9 runs (3 tasks x 3 seeds) in about 90 minutes, plus the three
teachers (about 35 minutes) if they are not trained yet.

Variants (`:arg`, comma-separated):
  teachers=workdirs  the folder holding the teachers' workdirs (finetune_<task>)
  smoke              seconds-long runs on the Brown fixture (brown_pos), 2 seeds, for tests;
                     the teacher is DIR/finetune_brown_pos of `teachers=`
"""

from __future__ import annotations

from pathlib import Path

from configs import common
from train.sweep_spec import Finding, Metric, Stage, Sweep

DISTILL = "configs/bert/distill.py"
TASKS = ("spam", "tweets", "brown_pos")
# DistilBERT Table 1 (GLUE dev): macro-score, then CoLA, MNLI, MRPC, QNLI, QQP, RTE, SST-2,
# STS-B, WNLI.
PAPER_TABLE1 = {"BERT-base": (79.5, 56.3, 86.7, 88.6, 91.8, 89.6, 69.3, 92.7, 89.0, 53.5),
                "DistilBERT": (77.0, 51.3, 82.2, 87.5, 89.2, 88.5, 59.9, 91.3, 86.9, 56.3)}
PAPER_SHARE = PAPER_TABLE1["DistilBERT"][0] / PAPER_TABLE1["BERT-base"][0]  # the "97%"
# The teacher's score the paper's student gives up: 2.5 GLUE points of 79.5 (3%); a student
# within 3 points of its teacher keeps about 97% of a score near 1.
KEPT_WITHIN = 3.0
SCORE_NAMES = {"spam": "accuracy", "tweets": "accuracy", "brown_pos": "token accuracy"}


def _keeps_the_score(task: str) -> Finding:
    """Sec. 4.1 / Table 1: the student "retains 97% of the performance" of its teacher: its
    test score against its teacher's on the same batches, seed by seed."""
    student, teacher = PAPER_TABLE1["DistilBERT"][0], PAPER_TABLE1["BERT-base"][0]
    return Finding(f"On {task}, a student with half the layers keeps its teacher's test "
                   f"{SCORE_NAMES[task]}: within {KEPT_WITHIN:g} points",
                   metric="score", row=task, against=task, against_metric="teacher_score",
                   expect="level", tolerance=KEPT_WITHIN,
                   paper=f"GLUE macro-score {student} vs {teacher} ({student - teacher:+.1f}, "
                         f"{100 * PAPER_SHARE:.0f}%)",
                   if_not="a task-specific student on a CPU budget: the teacher's fine-tuning "
                          "steps, not the paper's general-purpose distillation on a corpus")


def _absolute(folder: str) -> str:
    """A local folder as an absolute path (the runs may start elsewhere); URLs as they are."""
    return folder if "://" in folder else str(Path(folder).absolute())


def get_sweep(arg: str | None = None) -> Sweep:
    args = common.parse_arg(arg, teachers="workdirs", smoke=False)
    teachers = _absolute(args.teachers)
    tasks = ("brown_pos",) if args.smoke else TASKS
    quiet = {"train.progress_bar": False, "train.eval_every": 0, "data.eval_split": "test"}
    variant = "mode=task,smoke" if args.smoke else "mode=task"
    rows = {task: f"task={task},teacher={teachers}/finetune_{task}" for task in tasks}
    return Sweep(
        title="DistilBERT Tables 1 and 3: the share of its teacher's test score a student with "
              f"half the layers keeps{' (smoke)' if args.smoke else ''}",
        stages=(Stage("student", f"{DISTILL}:{variant}", quiet),),
        rows=rows,
        metrics=(Metric("score_of_teacher", "max"), Metric("score", "max"),
                 Metric("teacher_score", "max")),
        seeds=2 if args.smoke else 3,
        paper={task: {"score_of_teacher": PAPER_SHARE} for task in tasks},
        paper_note="DistilBERT's GLUE dev macro-score over BERT-base's (Table 1: 77.0 / 79.5); "
                   "per GLUE task from 86% (RTE) to 99% (MRPC, QQP) and 105% (WNLI). Ours: "
                   "a 3-layer student of MiniLM fine-tuned on each task, test split.",
        findings=tuple(_keeps_the_score(task) for task in tasks),
    )
