"""python -m benchmarks.distill_speed --task spam --json workdirs/bench/distil_spam.json

Inference speed of a distillation teacher and its student side by side, in one run (DistilBERT,
Sanh et al. 2019, Table 3: the student's parameters and inference time against the teacher's).

Both models are the task's fine-tuning head (models/bert_heads.py, the dataset's kind and labels)
on the teacher's encoder and on the student's (models/bert_student.py: the layers
`configs/bert/distill.py:mode=task` keeps, one out of two), at the length and eval batch that
config uses for the task, each forward pass compiled with `jax.jit` in inference mode. The
weights are random: the time of a forward pass does not depend on their values, so only the
teacher's config is read (MiniLM's config.json, or a workdir's), though a workdir must still
hold a checkpoint and its vocabulary (train/teacher.py checks them when it opens the run).

  python -m benchmarks.distill_speed --task spam                     # MiniLM vs 3 of its layers
  python -m benchmarks.distill_speed --task tweets --teacher workdirs/finetune_tweets
  python -m benchmarks.distill_speed --task spam --seq 128 --batch 1 --layers 0,2,4

Timing as benchmarks/train_step.py: each forward is compiled first (compile time reported
apart) and run once; then `--repeats` rounds run `--steps` forward passes of each model in turn,
the order reversed every other round (a shared machine's drift hits both alike); a round's time
per pass is its wall time / steps, and each model's time is its median round. Sequences per
second = batch / time; the speed-up is the teacher's time over the student's. The paper's
numbers stand beside ours: BERT-base 110M parameters, 668 s; DistilBERT 66M, 410 s (Table 3: a
full pass of STS-B's dev set, batch 1, on a CPU): 60% of the parameters, 1.63x as fast.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.outputs import benchmark_record, run_command
from configs.bert import distill as distill_config
from configs.bert.finetune import TASKS
from models.bert_student import select_layers, student_config
from train import flops

# DistilBERT Table 3: parameters (millions) and inference time (seconds) on a CPU.
PAPER_TABLE3 = {"BERT-base": (110, 668), "DistilBERT": (66, 410)}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.distill_speed",
                                     description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=TASKS, default="spam",
                        help="the dataset: its head, labels, length and batch")
    parser.add_argument("--teacher", default="minilm",
                        help="minilm, or a workdir whose config.json gives the teacher's model")
    parser.add_argument("--layers", default="every_other",
                        help="teacher layers the student keeps: every_other or '0,2,4'")
    parser.add_argument("--seq", type=int, default=0, help="tokens per sequence (0: the task's)")
    parser.add_argument("--batch", type=int, default=0,
                        help="examples per pass (0: the task's eval batch); a multiple-choice "
                             "example is one sequence per choice")
    parser.add_argument("--steps", type=int, default=5, help="timed passes per round")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (alternating models)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="", help="also write the run record here "
                                                   "(train/run_record.py)")
    parser.add_argument("--markdown", default="", help="also write the table here")
    args = parser.parse_args(argv)
    for name in ("steps", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.seq < 0 or args.batch < 0:
        parser.error("--seq and --batch must be >= 0 (0: the task's)")
    return args


def models(args):
    """(task settings, the teacher's head, the student's head) for `args`."""
    from data.pipelines.finetune_datasets import get_dataset
    from train.tasks.finetune import head_model
    from train.teacher import load_teacher

    config = distill_config.get_config(f"mode=task,task={args.task}")
    seq = args.seq or config.data.max_seq_length
    batch = args.batch or config.data.eval_batch_size
    teacher_cfg = load_teacher(args.teacher, build=False).model_config
    cfg = student_config(teacher_cfg, select_layers(teacher_cfg.num_layers, args.layers),
                         segments=config.distill.segments, pooler=config.distill.pooler)
    dataset = get_dataset(args.task)
    # A multiple-choice example is num_choices sequences, each encoded on its own.
    per_example = dataset.num_choices if dataset.kind == "multiple_choice" else 1
    settings = {"task": args.task, "kind": dataset.kind, "seq": seq, "batch": batch,
                "sequences_per_pass": batch * per_example, "dtype": teacher_cfg.dtype,
                "teacher": args.teacher, "layers": args.layers}
    return (settings, head_model(dataset.kind, teacher_cfg, dataset.num_labels),
            head_model(dataset.kind, cfg, dataset.num_labels))


def _inputs(settings: dict, kind: str, num_choices: int, vocab_size: int, seed: int):
    rng = np.random.default_rng(seed)
    shape = (settings["batch"], settings["seq"])
    if kind == "multiple_choice":
        shape = (settings["batch"], num_choices, settings["seq"])
    ids = rng.integers(5, vocab_size, shape, dtype=np.int32)
    segments = np.zeros(shape, np.int32)
    segments[..., shape[-1] // 2:] = 1
    return jnp.asarray(ids), jnp.asarray(segments), jnp.ones(shape, jnp.int32)


class Contender:
    """One model's compiled forward pass and its round times."""

    def __init__(self, label: str, model, inputs, seed: int):
        self.label, self.inputs, self.times = label, inputs, []
        params = jax.jit(lambda rng: model.init({"params": rng}, inputs[0])["params"])(
            jax.random.PRNGKey(seed))
        self.params = params
        self.num_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
        cfg = model.config
        self.forward_flops = flops.encoder_forward_flops(inputs[0].shape[-1], cfg.hidden_size,
                                                         cfg.mlp_dim, cfg.num_layers)
        self.num_layers = cfg.num_layers
        start = time.perf_counter()
        self.forward = jax.jit(lambda p, *x: model.apply({"params": p}, *x, train=False)).lower(
            params, *inputs).compile()
        self.compile_seconds = time.perf_counter() - start
        jax.block_until_ready(self.forward(params, *inputs))  # first run: allocation, caches

    def run(self, steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            out = self.forward(self.params, *self.inputs)
        jax.block_until_ready(out)
        return (time.perf_counter() - start) / steps


def run(args) -> dict:
    settings, teacher_model, student_model = models(args)
    from data.pipelines.finetune_datasets import get_dataset
    inputs = _inputs(settings, settings["kind"], get_dataset(args.task).num_choices,
                     teacher_model.config.vocab_size, args.seed)
    contenders = [Contender("teacher", teacher_model, inputs, args.seed),
                  Contender("student", student_model, inputs, args.seed)]
    for round_index in range(args.repeats):
        for c in (contenders if round_index % 2 == 0 else contenders[::-1]):
            c.times.append(c.run(args.steps))
    rows = [{"label": c.label, "layers": c.num_layers, "params": c.num_params,
             "compile_s": c.compile_seconds, "pass_s": statistics.median(c.times),
             "pass_s_rounds": c.times, "sequences_per_s": settings["sequences_per_pass"] /
             statistics.median(c.times), "encoder_gflops_per_sequence": c.forward_flops / 1e9}
            for c in contenders]
    teacher, student = rows
    paper_params = PAPER_TABLE3["DistilBERT"][0] / PAPER_TABLE3["BERT-base"][0]
    paper_speedup = PAPER_TABLE3["BERT-base"][1] / PAPER_TABLE3["DistilBERT"][1]
    ratios = {"speedup": teacher["pass_s"] / student["pass_s"],
              "flops_ratio": (teacher["encoder_gflops_per_sequence"]
                              / student["encoder_gflops_per_sequence"]),
              "param_ratio": student["params"] / teacher["params"]}
    return {**settings, "device": f"{jax.devices()[0].platform}: {jax.devices()[0].device_kind}",
            "steps": args.steps, "repeats": args.repeats, "rows": rows, "ratios": ratios,
            "paper": {"param_ratio": paper_params, "speedup": paper_speedup}}


def markdown(report: dict) -> str:
    head = (f"**distillation, {report['task']}** ({report['kind']}), teacher {report['teacher']}, "
            f"student layers {report['layers']}: batch {report['batch']} "
            f"({report['sequences_per_pass']} sequences), seq {report['seq']}, "
            f"{report['dtype']}, inference; {report['device']}; median of "
            f"{report['repeats']} rounds of {report['steps']} passes")
    lines = [head, "", "| model | layers | parameters | compile s | pass ms | sequences/s | "
                       "encoder GFLOPs/sequence |", "|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['label']} | {r['layers']} | {r['params']:,} | {r['compile_s']:.1f} | "
                     f"{r['pass_s'] * 1e3:.1f} | {r['sequences_per_s']:.1f} | "
                     f"{r['encoder_gflops_per_sequence']:.3g} |")
    paper, ratios = report["paper"], report["ratios"]
    lines += ["", f"- student speed-up (teacher time / student time): **{ratios['speedup']:.2f}x** "
                  f"(encoder FLOPs ratio {ratios['flops_ratio']:.2f}x; paper, Table 3: "
                  f"{paper['speedup']:.2f}x)",
              f"- student parameters / teacher's: **{ratios['param_ratio']:.1%}** (paper: "
              f"{paper['param_ratio']:.1%}; the embeddings, which both keep whole, are a larger "
              "share of a small model)"]
    return "\n".join(lines)


def record(args, report: dict, command: list[str], started: float) -> dict:
    """The run record (train/run_record.py): the report as its metrics, with its table."""
    return benchmark_record(args, report, markdown(report), command, started,
                            peak_source="not measured (an inference speed comparison)")


def main(argv=None) -> dict:
    return run_command("benchmarks.distill_speed", argv, parse_args=parse_args, run=run,
                       table=markdown, record=record)


if __name__ == "__main__":
    main(sys.argv[1:])
