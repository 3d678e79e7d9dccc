"""Every command the README and docs/ show runs as written: its config file and `:arg` variant
exist, its `--config.KEY=VALUE` overrides name real keys with values of their type, its datasets
are ones `python -m data.fetch` knows, its sweep config loads. (Checked without training: a
config error is what a reader would hit first.) Placeholders in capitals (CONFIG, DIR, NAME)
and `...` are a reader's to fill in, so a command holding one is checked only as far as it is
written out."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from train.config import apply_override, load_config_file

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"```bash\n(.*?)```", re.S)
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]+$|\.\.\.|^[A-Z]+[:=]")


def commands() -> list[tuple[str, list[str]]]:
    """(page:line, argv after `python -m`) of every `python -m` command in a bash block."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for block in FENCE.finditer(text):
            start = text[:block.start()].count("\n") + 2
            lines = block.group(1).replace("\\\n", " ").split("\n")
            for offset, line in enumerate(lines):
                tokens = shlex.split(line, comments=True)
                parts, current = [], []
                for token in tokens + ["&&"]:
                    if token in ("&&", ";", "||"):
                        parts.append(current)
                        current = []
                    else:
                        current.append(token)
                for words in parts:
                    while words and "=" in words[0] and not words[0].startswith("-"):
                        words = words[1:]  # VARIABLE=value before the command
                    if words and words[0].endswith("python") and words[1:2] == ["-m"]:
                        where = f"{page.relative_to(REPO)}:{start + offset}"
                        found.append((where, words[2:]))
    return found


COMMANDS = commands()
# Workdirs the pages' commands create: a later command may start from one (init=DIR).
WORKDIRS = {argv[argv.index("--workdir") + 1] for _, argv in COMMANDS if "--workdir" in argv[:-1]}
# Checkpoints `python -m train.export WORKDIR OUT` writes: a later command may start from one.
EXPORTS = {argv[2] for _, argv in COMMANDS if argv[0] == "train.export" and len(argv) > 2}


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


@pytest.mark.parametrize("where, argv", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_command_runs_as_written(where, argv):
    module, args = argv[0], argv[1:]
    if module == "data.fetch":
        from data.fetching import catalog

        names = [a for a in args if not a.startswith("-") and not PLACEHOLDER.search(a)]
        for name in names:
            catalog.get_source(name)  # DataError naming the known ones
        return
    if module in ("train", "train.sweep") and "--help" in args:
        from train.__main__ import parse_args

        with pytest.raises(SystemExit) as done:
            parse_args(args)
        assert done.value.code == 0
        return
    if module in ("train", "train.sweep"):
        spec = _value(args, "--config")
        assert spec, f"{where}: {module} without --config"
        if PLACEHOLDER.search(spec):
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
        parsed, overrides = parse_args(filled + (["--workdir", "x"] if "--workdir" not in args
                                                 else []))
        config = load_config_file(str(REPO / parsed.config))
        for key, value in overrides:
            apply_override(config, key, value)
        if config.get("init") in WORKDIRS | EXPORTS:  # the page trains or exports it first
            return
        try:  # what --print_config checks: the model, the task, the variant's values
            plan_task(config, None)
        except DataError:  # data not fetched here (a pretrained model's sizes): checked above
            pass
        return
    if module == "train.export":
        from train.export import parse_args as export_args

        parsed = export_args(args)
        assert parsed.workdir in WORKDIRS or PLACEHOLDER.search(parsed.workdir), \
            f"{where}: exports {parsed.workdir}, which no command on the pages trains"
        return
    known = {"train.baselines", "train.tables", "train.records", "train.sweep_figures",
             "benchmarks.train_step"}
    assert module in known, f"{where}: a command no test checks: python -m {module}"


def test_a_misspelt_variant_in_a_page_would_be_caught(tmp_path):
    """The check has teeth: a page with a wrong variant or override fails it."""
    from train.config import ConfigError

    with pytest.raises((ConfigError, ValueError)):
        test_command_runs_as_written("x", ["train", "--config",
                                           "configs/vit/fashion_mnist.py:posemb=sincos2d"])
    with pytest.raises(ConfigError):
        test_command_runs_as_written("x", ["train", "--config", "configs/vit/fashion_mnist.py",
                                           "--config.model.num_layer=8"])
