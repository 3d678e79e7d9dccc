"""python -m benchmarks.gpu_recipes [--runs NAME ...] [--records DIR] [--dry_run] [-- ARGS]

Runs the paper-scale recipes' models at their real size on one GPU, on TFDS's mock data, one
run per recipe phase (train/recipe_runs.py: what each run is and how it differs from its recipe;
docs/launch.md's measured table reads their records), one after another in RUNS' order:

  python -m benchmarks.gpu_recipes --records workdirs/gpu_recipes/records
  python -m benchmarks.gpu_recipes --runs gpu_recipe_bert_large_128 gpu_recipe_bert_large_512
  python -m train.records save workdirs/gpu_recipes/records/NAME/record.json NAME   # each

Each run starts in a fresh workdir (a measurement is never resumed: its old workdir is removed
first) and sees one GPU (CUDA_VISIBLE_DEVICES=0 unless set); a run that fails, or leaves no
finished record, does not stop the others, and the command exits 1 naming them. `--records
DIR` copies each finished run's record.json to DIR/NAME/record.json (the workdirs also hold
checkpoints of up to 4 GB). ViT's fine-tuning run starts from the from-scratch run's workdir,
so run both, in that order. Arguments after `--` go to every run (they win over its own: a
check at another size, whose record the docs' table refuses). The vocabularies, trained on mock
text, are cached in workdirs/gpu_recipes/data (the runs' PAPERS_JAX_DATA), never where a real
run of the same recipe would find them, and shared by the runs of a recipe's model. How
long the eight take on a GPU is not measured yet: each compiles a train and an eval step
(BERT-base's train step compiled in 37 to 45 s on an H100, docs/benchmarks.md), runs 200 steps
and writes a checkpoint (BERT-large's with its Adam state: 4 GB). Where a machine is lent for
minutes, run a few at a time with --runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from train.recipe_runs import RUNS, WORKDIRS
from train.run_record import FILENAME, REPO


def run_all(names: list[str], records: str, dry_run: bool, extra: list[str],
            python: str = sys.executable, root: Path = REPO) -> list[str]:
    """Runs the named runs (all by default) in RUNS' order, from `root` (the repository; their
    workdirs are relative to it); the names of those that failed."""
    chosen = [run for run in RUNS if not names or run.name in names]
    failed = []
    for run in chosen:
        argv = [python, *shlex.split(run.command)[1:], *extra]
        if dry_run:
            print(shlex.join(argv), flush=True)
            continue
        workdir = root / run.workdir
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"[gpu_recipes] {run.name}: {shlex.join(argv)}", flush=True)
        start = time.perf_counter()
        env = {"CUDA_VISIBLE_DEVICES": "0", **os.environ,
               "PAPERS_JAX_DATA": str(root / WORKDIRS / "data")}
        code = subprocess.run(argv, cwd=root, env=env).returncode
        record = workdir / FILENAME
        finished = record.exists() and json.loads(record.read_text())["finished"]
        ok = code == 0 and finished
        outcome = ("done" if ok else f"FAILED (exit {code})" if code else
                   "FAILED (no finished record: see its output above)")
        print(f"[gpu_recipes] {run.name}: {outcome} in {time.perf_counter() - start:.0f} s",
              flush=True)
        if not ok:
            failed.append(run.name)
        elif records:
            target = Path(records) / run.name / FILENAME
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(record, target)
    return failed


def parse_args(argv=None) -> tuple[argparse.Namespace, list[str]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_recipes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    names = [run.name for run in RUNS]
    parser.add_argument("--runs", nargs="+", default=[], choices=names, metavar="NAME",
                        help=f"these runs only (default: all): {', '.join(names)}")
    parser.add_argument("--records", default="",
                        help="copy each finished run's record.json to DIR/NAME/record.json")
    parser.add_argument("--dry_run", action="store_true", help="print the commands only")
    return parser.parse_args(own), extra


def main(argv=None) -> int:
    args, extra = parse_args(argv)
    failed = run_all(args.runs, args.records, args.dry_run, extra)
    if failed:
        print(f"[gpu_recipes] failed: {' '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
