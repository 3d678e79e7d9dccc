"""python -m train.tables [FILE.md ...] [--check] [--results DIR]

Renders every table region of the given Markdown files (default: README.md, docs/**/*.md and
notebooks/**/*.md) from the committed records under notebooks/results/:

    <!-- table: NAME -->
    (whatever is here is replaced by the table NAME)
    <!-- /table -->

so that no number in the docs is typed by hand. The tables (TABLES below): single runs from
notebooks/results/runs/NAME/record.json (train/result_tables.py; a run not recorded yet renders
as the commands that make and save its record), the sweeps from their runs' result.json
(train/sweep_compare.py), the verdicts on the papers' findings they test (train/findings.py),
the diagnosis of BERT Table 8's collapsed encoders (train/diagnosis_tables.py), and
docs/launch.md's cost estimates from the recipes' configs (train/recipe_costs.py).
--check writes nothing and exits 1 naming every region that differs
from its records (tests/test_tables.py runs it on the repository's docs).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Callable

from train import diagnosis_tables, findings
from train import result_tables as rt
from train.run_record import REPO, RecordError
from train.sweep_compare import SWEEPS, load, markdown_table, sweep_command

OPEN = re.compile(r"^<!-- table: (\S+) -->$")
CLOSE = "<!-- /table -->"
COMMAND = "python -m train.tables"


class TableError(ValueError):
    """A Markdown file's table markers are malformed or name an unknown table."""


def _sweep(folder: str) -> Callable[[rt.Records], str]:
    def render(records: rt.Records) -> str:
        try:
            sweep, runs = load(folder, records.results, allow_missing=True)  # says which
        except FileNotFoundError:
            return (f"(not recorded yet: `{sweep_command(folder)}`, then copy workdirs/{folder} "
                    f"to notebooks/results/{folder})")
        return markdown_table(folder, sweep, runs, records.results)
    return render


def _launch(table: str) -> Callable[[rt.Records], str]:
    """docs/launch.md's tables, computed from the recipes' configs (train/recipe_costs.py): the
    estimates from the configs alone, the measured table from the GPU records too."""
    def render(records: rt.Records) -> str:
        from train import recipe_costs  # the models' configs and the FLOPs model: only here

        if table == "measured_table":
            return recipe_costs.measured_table(records)
        if table == "recipe_runs":
            from train import recipe_runs

            return recipe_runs.table(records) + "\n\n" + recipe_runs.settings()
        return getattr(recipe_costs, table)()
    return render


TABLES: dict[str, Callable[[rt.Records], str]] = {
    "demo": rt.demo,
    "image_classifiers": rt.image_classifiers,
    "translation": rt.translation,
    "bert_pretraining": rt.bert_pretraining,
    "finetuning": rt.finetuning,
    "baselines": rt.baseline_table,
    "bench_bert_base": rt.benchmark("bench_bert_base"),
    "bench_vit_b16": rt.benchmark("bench_vit_b16"),
    "bench_gpu_bert_base_128": rt.benchmark("bench_gpu_bert_base_128"),
    "bench_gpu_bert_large_512": rt.benchmark("bench_gpu_bert_large_512"),
    "bench_gpu_vit_b16": rt.benchmark("bench_gpu_vit_b16"),
    "bench_gpu_vit_b16_xla": rt.benchmark("bench_gpu_vit_b16_xla"),
    "bench_mae_step": rt.benchmark("bench_mae_step"),
    "bench_distil_spam": rt.benchmark("bench_distil_spam"),
    "bench_distil_tweets": rt.benchmark("bench_distil_tweets"),
    "language_model": rt.language_model,
    "lm_learning_rate": lambda records: rt.language_model(records, rt.LM_LEARNING_RATE),
    "bench_lm_decode": rt.benchmark("bench_lm_decode"),
    "bench_marian_decode": rt.benchmark("bench_marian_decode"),
    "bench_input_pipeline": rt.benchmark("bench_input_pipeline"),
    "headline_runs": rt.headline_runs,
    "headline": rt.headline,
    "launch_recipes": _launch("recipes_table"),
    "launch_costs": _launch("costs_table"),
    "launch_measured": _launch("measured_table"),
    "launch_recipe_runs": _launch("recipe_runs"),
    **{f"sweep_{folder}": _sweep(folder) for folder in SWEEPS},
    **{f"findings_{folder}": (lambda records, folder=folder:
                              findings.markdown_table(folder, records.results))
       for folder in SWEEPS},
    "bert_table8_collapse": diagnosis_tables.collapse_table,
    "bert_table8_finetune_probe": diagnosis_tables.finetune_table,
}


def render_text(text: str, where: str, render: Callable[[str], str]) -> tuple[str, list[str]]:
    """`text` with every table region filled by `render(name)`; also the names of the regions
    whose content changed."""
    lines = text.split("\n")
    out, changed, i = [], [], 0
    while i < len(lines):
        opened = OPEN.match(lines[i])
        out.append(lines[i])
        i += 1
        if not opened:
            if lines[i - 1].strip() == CLOSE:
                raise TableError(f"{where}:{i}: {CLOSE} without a table opened before it")
            continue
        name = opened.group(1)
        if name not in TABLES:
            raise TableError(f"{where}:{i}: no table {name!r}; the tables: {', '.join(TABLES)}")
        end = i
        while end < len(lines) and lines[end].strip() != CLOSE:
            if OPEN.match(lines[end]):
                break
            end += 1
        if end == len(lines) or lines[end].strip() != CLOSE:
            raise TableError(f"{where}:{i}: table {name!r} has no {CLOSE} before the next "
                             "table or the end of the file")
        new = render(name).strip("\n").split("\n")
        if lines[i:end] != new:
            changed.append(name)
        out.extend(new)
        out.append(lines[end])
        i = end + 1
    return "\n".join(out), changed


def default_files(root: Path = REPO) -> list[Path]:
    files = [root / "README.md", *sorted((root / "docs").glob("**/*.md")),
             *sorted((root / "notebooks").glob("**/*.md"))]
    return [f for f in files if f.is_file()]


def update(files: list[Path], records: rt.Records, *, write: bool) -> list[str]:
    """Renders every region of `files` (writing the files when `write`); returns one line per
    region that differed: 'FILE: table NAME'."""
    cache: dict[str, str] = {}

    def render(name: str) -> str:
        if name not in cache:
            cache[name] = TABLES[name](records)
        return cache[name]

    texts = [(path, read(path)) for path in files]  # every file read before any is written
    differing, rendered = [], []
    for path, text in texts:
        new, changed = render_text(text, str(path), render)
        differing += [f"{path}: table {name!r}" for name in changed]
        rendered.append((path, text, new))
    for path, text, new in rendered:
        if write and new != text:
            path.write_text(new, encoding="utf-8")
    return differing


def read(path: Path) -> str:
    """The text of the Markdown file `path`; TableError for one that cannot be read as UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TableError(f"{path} does not exist: give Markdown files that do, or none for "
                         "README.md, docs/ and notebooks/") from None
    except UnicodeDecodeError as error:
        raise TableError(f"{path} is not UTF-8 text (byte {error.start}: {error.reason}): give "
                         "a Markdown file") from None
    except OSError as error:  # a folder, no permission, ...
        raise TableError(f"{path}: {error.strerror or error}: give a Markdown file") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", type=Path,
                        help="Markdown files (default: README.md, docs/**/*.md, notebooks/**/*.md)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a region differs from its records")
    parser.add_argument("--results", type=Path, default=rt.RESULTS,
                        help="the committed records, a folder holding runs/ "
                             "(default: %(default)s)")
    args = parser.parse_args(argv)
    files = args.files or default_files()
    try:
        records = rt.Records.committed(args.results)  # not any folder: it would blank every number
        differing = update(files, records, write=not args.check)
    except (TableError, RecordError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.check:
        for line in differing:
            print(f"{line} differs from its records; `{COMMAND}` renders it again")
        return 1 if differing else 0
    for line in differing:
        print(f"rendered {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
