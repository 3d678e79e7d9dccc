"""Every command the README and docs/ show runs as written: its config file and `:arg` variant
exist, its `--config.KEY=VALUE` overrides name real keys with values of their type, its datasets
are ones `python -m data.fetch` knows, its sweep config loads, and its options are ones the
command's own parser accepts. (Checked without training: a config error is what a reader would
hit first.) Commands are read from `bash` blocks and from inline code in the text (the tables
of commands that make each record among them); an inline `python -m MODULE` alone names the
command and only its module is checked. Placeholders in capitals (CONFIG, DIR, NAME, A), in
angle brackets (`<sweep>`) and `...` are a reader's to fill in, so a command holding one is
checked only as far as it is written out."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
import sys
from pathlib import Path

import pytest

from train.config import apply_override, load_config_file

REPO = Path(__file__).resolve().parents[1]
# The pages written for readers (a sweep's own results.md is its output, not one of them).
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
         *sorted((REPO / "notebooks").glob("**/README.md"))]
FENCE = re.compile(r"```bash\n(.*?)```", re.S)
INLINE = re.compile(r"(?<!`)`([^`\n]*python -m [^`\n]*)`(?!`)")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$|\.\.\.|<\w+>|^[A-Z]+[:=]")
# Modules whose command line the test parses with their own parser, stopped right after it.
PARSED_BY_MAIN = ("data.fetch", "train.baselines", "train.tables", "train.records",
                  "train.sweep_figures", "train.recipe_costs", "train.diagnose_encoder",
                  "train.extrapolation_report", "benchmarks.marian_decode", "train.evaluate")


def _split(line: str) -> list[list[str]]:
    """The argv after `python -m` of each command on a shell line (`&&`, `;`, `||` chained)."""
    parts, current = [], []
    for token in shlex.split(line, comments=True) + ["&&"]:
        if token in ("&&", ";", "||"):
            parts.append(current)
            current = []
        else:
            current.append(token)
    found = []
    for words in parts:
        while words and "=" in words[0] and not words[0].startswith("-"):
            words = words[1:]  # VARIABLE=value before the command
        if words and words[0].endswith("python") and words[1:2] == ["-m"]:
            found.append(words[2:])
    return found


def commands() -> list[tuple[str, list[str]]]:
    """(page:line, argv after `python -m`) of every `python -m` command in a bash block or in
    inline code."""
    found = []
    for page in PAGES:
        text = page.read_text()
        blocks = list(FENCE.finditer(text))
        for block in blocks:
            start = text[:block.start()].count("\n") + 2
            lines = block.group(1).replace("\\\n", " ").split("\n")
            for offset, line in enumerate(lines):
                where = f"{page.relative_to(REPO)}:{start + offset}"
                found += [(where, argv) for argv in _split(line)]
        for span in INLINE.finditer(text):
            if any(b.start() <= span.start() < b.end() for b in blocks):
                continue
            where = f"{page.relative_to(REPO)}:{text[:span.start()].count(chr(10)) + 1}"
            found += [(where, argv) for argv in _split(span.group(1))]
    return found


COMMANDS = commands()
# Workdirs the pages' commands create: a later command may start from one (init=DIR).
WORKDIRS = {argv[argv.index("--workdir") + 1] for _, argv in COMMANDS if "--workdir" in argv[:-1]}
# Checkpoints `python -m train.export WORKDIR OUT` writes: a later command may start from one.
EXPORTS = {argv[2] for _, argv in COMMANDS if argv[0] == "train.export" and len(argv) > 2}


class _Parsed(Exception):
    """Raised by the patched ArgumentParser.parse_args once the command line has parsed."""


def _value(argv: list[str], option: str) -> str | None:
    for i, item in enumerate(argv):
        if item == option and i + 1 < len(argv):
            return argv[i + 1]
        if item.startswith(option + "="):
            return item.split("=", 1)[1]
    return None


def test_the_pages_show_commands():
    modules = {argv[0] for _, argv in COMMANDS}
    assert {"train", "data.fetch", "train.sweep"} <= modules, modules


def _parses(module: str, args: list[str], monkeypatch) -> None:
    """`python -m module args` gets past the command's own argument parser (SystemExit(2) and
    its usage message if not): nothing after the parsing runs."""
    if module == "train":
        from train.__main__ import parse_args
    elif module == "train.sweep":
        from train.sweep import parse_args
    elif module == "benchmarks.train_step":
        from benchmarks.train_step import parse_args
    elif module == "benchmarks.mae_step":
        from benchmarks.mae_step import parse_args
    elif module == "benchmarks.distill_speed":
        from benchmarks.distill_speed import parse_args
    elif module == "train.export":
        from train.export import parse_args
    elif module == "train.kneser_ney":
        from train.kneser_ney import parse_args
    elif module == "benchmarks.lm_decode":
        from benchmarks.lm_decode import parse_args
    elif module == "benchmarks.input_pipeline":
        from benchmarks.input_pipeline import parse_args
    elif module == "benchmarks.gpu_recipes":
        from benchmarks.gpu_recipes import parse_args
    elif module == "train.predict":  # the docs' workdirs are not there: the options of the
        from train.predict import PREDICTORS  # predictor whose parser takes them
        from train.predict.__main__ import build_parser

        def parse_args(argv):
            for task in PREDICTORS:
                known, unknown = build_parser(task).parse_known_args(argv)
                if not unknown:
                    return known
            raise AssertionError(f"no predictor of {sorted(PREDICTORS)} takes {argv}")
    else:
        real = argparse.ArgumentParser.parse_args

        def parse_then_stop(self, *a, **k):
            real(self, *a, **k)
            raise _Parsed

        monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
        main = importlib.import_module(module).main
        parse_args = main
    try:
        parse_args(args)
    except _Parsed:
        pass
    except SystemExit as done:
        assert done.code == 0, f"python -m {module} {shlex.join(args)}: exit {done.code}"


@pytest.fixture(scope="module")
def minilm_root(tmp_path_factory):
    """A data root holding the MiniLM stand-in, so that the pages' init=minilm and
    teacher=minilm commands are planned like the others (their sizes are the stand-in's)."""
    from minilm_standin import install_minilm_standin

    root = tmp_path_factory.mktemp("docs_data")
    install_minilm_standin(root)
    return root


@pytest.mark.parametrize("where, argv", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_command_runs_as_written(where, argv, monkeypatch, minilm_root):
    module, args = argv[0], argv[1:]
    known = {"train", "train.sweep", "benchmarks.train_step", "benchmarks.mae_step",
             "benchmarks.distill_speed", "train.export", "train.kneser_ney",
             "benchmarks.lm_decode", "benchmarks.input_pipeline", "train.predict",
             "benchmarks.gpu_recipes", *PARSED_BY_MAIN}
    assert module in known, f"{where}: a command no test checks: python -m {module}"
    if not args:  # `python -m train.sweep` named in the text: the module is the command
        return
    partial = any(PLACEHOLDER.search(a) for a in args)
    if not partial:
        _parses(module, args, monkeypatch)
    if module == "data.fetch":
        from data.fetching import catalog

        names = [a for a in args if not a.startswith("-") and not PLACEHOLDER.search(a)]
        for name in names:
            catalog.parts(name)  # DataError naming the known ones
        return
    if module == "train.export" and not partial:
        from train.export import parse_args as export_args

        parsed = export_args(args)
        assert parsed.workdir in WORKDIRS, \
            f"{where}: exports {parsed.workdir}, which no command on the pages trains"
        _check_exportable(where, parsed)
        return
    if module not in ("train", "train.sweep") or "--help" in args:
        return
    spec = _value(args, "--config")
    assert spec or partial, f"{where}: {module} without --config"
    if not spec or PLACEHOLDER.search(spec):
        return
    path = spec.partition(":")[0]
    assert (REPO / path).is_file(), f"{where}: no config file {path}"
    if module == "train.sweep":
        from train.sweep_spec import load_sweep_file

        load_sweep_file(str(REPO / spec) if ":" not in spec else f"{REPO / path}:"
                        f"{spec.partition(':')[2]}")
        return
    from data.errors import DataError
    from train.__main__ import parse_args
    from train.tasks import plan_task

    filled = ["x" if PLACEHOLDER.search(a) else a for a in args if a != "..."]
    if "--workdir" not in filled:  # --print_config (parsed above) or a partial command
        filled += ["--workdir", "x"]
    parsed, overrides = parse_args(filled)
    config = load_config_file(str(REPO / parsed.config))
    for key, value in overrides:
        apply_override(config, key, value)
    if config.get("init") in WORKDIRS | EXPORTS:  # the page trains or exports it first
        return
    if "distill" in config and config.distill.teacher in WORKDIRS:  # ... or that teacher
        return
    monkeypatch.setenv("PAPERS_JAX_DATA", str(minilm_root))
    try:  # what --print_config checks: the model, the task, the variant's values
        plan_task(config, None)
    except DataError as error:  # data not fetched here: checked above (MiniLM is here)
        assert "minilm" not in str(error).lower(), f"{where}: {error}"


def _trained_config(workdir: str):
    """The config of the first command on the pages that trains `workdir` (variant and
    overrides applied)."""
    from train.__main__ import parse_args

    for _, argv in COMMANDS:
        if argv[0] == "train" and _value(argv, "--workdir") == workdir:
            parsed, overrides = parse_args(argv[1:])
            config = load_config_file(str(REPO / parsed.config))
            for key, value in overrides:
                apply_override(config, key, value)
            return config
    raise AssertionError(f"no command on the pages trains {workdir}")


def _check_exportable(where: str, parsed) -> None:
    """An export command's run has a model its format describes: the ViT that the page trained
    into the workdir passes the exporter's own check (what `python -m train.export` refuses
    with, after the run's minutes of training)."""
    config = _trained_config(parsed.workdir)
    if config.model.name != "vit":
        return
    from models import hf_vit, vit_npz
    from models.vit import ViTConfig
    from train.run_config import saved_model

    model = saved_model(ViTConfig, {"model": config.model.to_dict()}, parsed.workdir)
    npz = parsed.format == "npz" or (parsed.format == "auto" and parsed.out.endswith(".npz"))
    try:
        (vit_npz if npz else hf_vit)._check_convertible(model)
    except Exception as error:  # CheckpointError: what the export would print
        raise AssertionError(f"{where}: {parsed.workdir} cannot be exported to "
                             f"{parsed.out}: {error}") from error


def test_an_export_of_a_model_the_format_cannot_hold_would_be_caught():
    """The check has teeth: the default Fashion-MNIST ViT (a conv stem, mean pooling) is not an
    HF ViT, and exporting it is refused."""
    from train.export import parse_args as export_args

    parsed = export_args(["workdirs/my_run", "vit_hf"])
    with pytest.raises(AssertionError, match="pool='mean'"):
        _check_exportable("README.md:0", parsed)


def test_a_misspelt_variant_in_a_page_would_be_caught(monkeypatch, minilm_root, tmp_path):
    """The check has teeth: a page with a wrong variant or override fails it; one that starts
    from MiniLM is planned against the stand-in, and fails rather than passes unplanned where
    MiniLM is missing."""
    from train.config import ConfigError

    with pytest.raises((ConfigError, ValueError), match="sincos2d"):
        test_command_runs_as_written("x", ["train", "--config",
                                           "configs/vit/fashion_mnist.py:posemb=sincos2d",
                                           "--workdir", "w"], monkeypatch, minilm_root)
    with pytest.raises(ConfigError, match="num_layer"):
        test_command_runs_as_written("x", ["train", "--config", "configs/vit/fashion_mnist.py",
                                           "--config.model.num_layer=8", "--workdir", "w"],
                                     monkeypatch, minilm_root)
    minilm = ["train", "--config", "configs/bert/finetune.py:task=spam,init=minilm",
              "--workdir", "w"]
    test_command_runs_as_written("x", minilm, monkeypatch, minilm_root)
    with pytest.raises(AssertionError, match="minilm"):  # not fetched: failed, not skipped
        test_command_runs_as_written("x", minilm, monkeypatch, tmp_path)


@pytest.mark.parametrize("argv", [
    ["train", "--config", "configs/vit/fashion_mnist.py"],  # no --workdir, no --print_config
    ["train.sweep", "--config", "configs/ablations/vit_posemb.py", "--workdir", "w", "--sedes", "3"],
    ["data.fetch", "--lst"],
    ["train.records", "save", "workdirs/bench/vit_b16.json"],  # the name left out
    ["train.baselines", "--task", "spam_ham"],
    ["train.tables", "--chek"],
    ["benchmarks.train_step", "--model", "vit", "--size", "B/16", "--batch", "0"],
], ids=lambda argv: " ".join(argv))
def test_an_option_its_command_does_not_take_would_be_caught(argv, monkeypatch, minilm_root):
    with pytest.raises(AssertionError, match=f"python -m {re.escape(argv[0])} .*: exit 2"):
        test_command_runs_as_written("x", argv, monkeypatch, minilm_root)


def test_inline_commands_are_read_and_a_bare_module_is_a_name(tmp_path, monkeypatch):
    """Commands in inline code count, a chain gives each of its commands, a bash block's lines
    are not read twice; `python -m train` alone in the text is not a command to run."""
    page = tmp_path / "page.md"
    page.write_text("Run `python -m data.fetch spam && python -m train.baselines --task spam` "
                    "or see `python -m train`.\n\n```bash\npython -m train.tables --check\n```\n")
    this = sys.modules[__name__]
    monkeypatch.setattr(this, "PAGES", [page])
    monkeypatch.setattr(this, "REPO", tmp_path)
    assert [argv for _, argv in commands()] == [
        ["train.tables", "--check"], ["data.fetch", "spam"],
        ["train.baselines", "--task", "spam"], ["train"]]
