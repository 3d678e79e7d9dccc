"""Loading experiment configs: `FILE[:ARG]`, `--config.key=value` overrides, dataclass building.

Every failure here happens before anything is compiled and names the key, its value and what is
allowed, with a "did you mean" for misspellings.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib.util
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import ml_collections


# The experiment configs: the configs package beside this one (in a checkout and in an installed
# site-packages alike).
CONFIGS = Path(__file__).resolve().parent.parent / "configs"

# How a bool may be written on the command line (overrides and config `:arg`s alike).
BOOL_WORDS = {"1": True, "true": True, "yes": True, "on": True,
              "0": False, "false": False, "no": False, "off": False}


class ConfigError(ValueError):
    """A config key is unknown, or its value is impossible."""


def _suggest(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f' Did you mean "{close[0]}"?' if close else ""


def call_file_function(spec: str, function: str, error_type: type[ValueError], what: str) -> Any:
    """'FILE.py:ARG' -> FILE.py's `function(ARG or None)`; every failure raises `error_type`.

    The loader of experiment configs (`get_config`) and of sweep configs (`get_sweep`).
    """
    path, _, arg = spec.partition(":")
    file = Path(path)
    if not file.is_file():
        raise error_type(f"{what} file {path!r} does not exist (from {spec!r})")
    module_spec = importlib.util.spec_from_file_location(f"_{function}_{file.stem}", file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    if not hasattr(module, function):
        raise error_type(f"{what} file {path!r} defines no {function}(arg) function")
    try:
        return getattr(module, function)(arg or None)
    except ValueError as error:  # the file's own argument checks
        raise error_type(f"{path}: {error}") from error


def load_config_file(spec: str) -> ml_collections.ConfigDict:
    """'configs/vit/fashion_mnist.py:posemb=none,smoke' -> get_config('posemb=none,smoke')."""
    return call_file_function(spec, "get_config", ConfigError, "config")


def a_type(kind: type) -> str:
    """'an int', 'a float': a type's name with its article, for error messages."""
    name = kind.__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _parse_value(key: str, raw: str, current: Any) -> Any:
    """Reads `raw` as the type of the value it replaces."""
    if isinstance(current, bool):
        if raw.lower() not in BOOL_WORDS:
            raise ConfigError(f"config.{key}={raw!r}: expected a bool (true/false)")
        return BOOL_WORDS[raw.lower()]
    if isinstance(current, str):
        return raw
    if current is None and raw.lower() in BOOL_WORDS and not raw.isdigit():  # true / false
        return BOOL_WORDS[raw.lower()]  # (1 and 0 are numbers: num_kv_heads=1 is one head)
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError) as error:
        expected = ("a Python literal (None, True, 64, 0.1, 'text', (1, 2)); its default is "
                    "None" if current is None else f"{a_type(type(current))} like {current!r}")
        raise ConfigError(f"config.{key}={raw!r}: expected {expected}") from error
    if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(current, tuple) and isinstance(value, list):
        value = tuple(value)
    if isinstance(value, bool) and not isinstance(current, bool) and current is not None:
        raise ConfigError(f"config.{key}={raw!r}: expected {a_type(type(current))} like "
                          f"{current!r}, got a bool")  # bool is an int to isinstance
    if current is not None and not isinstance(value, type(current)):
        raise ConfigError(f"config.{key}={raw!r}: expected {a_type(type(current))} like "
                          f"{current!r}, got {type(value).__name__}")
    kinds = {type(item) for item in current} if isinstance(current, tuple) else set()
    if len(kinds) == 1 and kinds <= {str, bool} and any(type(v) not in kinds for v in value):
        kind = kinds.pop()  # a tuple of names or of flags: each item of that type
        raise ConfigError(f"config.{key}={raw!r}: expected a tuple of {kind.__name__}s like "
                          f"{current!r}")
    return value


def apply_override(config: ml_collections.ConfigDict, key: str, raw: str) -> None:
    """Sets config.<key> (dotted) from a command-line string; the key must already exist."""
    node = config
    parts = key.split(".")
    for depth, part in enumerate(parts):
        path = ".".join(parts[:depth + 1])
        if part not in node:
            raise ConfigError(f"unknown config key config.{path}.{_suggest(part, node.keys())} "
                              f"Keys here: {sorted(node.keys())}")
        if depth < len(parts) - 1:
            node = node[part]
            if not isinstance(node, ml_collections.ConfigDict):
                raise ConfigError(f"config.{path} is a value, not a section")
    current = node[parts[-1]]
    if isinstance(current, ml_collections.ConfigDict):
        raise ConfigError(f"config.{key} is a section; set one of its keys: {sorted(current.keys())}")
    with node.unlocked():
        node[parts[-1]] = _parse_value(key, raw, current)


def to_dataclass(cls, section: ml_collections.ConfigDict, prefix: str, **extra):
    """Builds a frozen model config (e.g. ViTConfig) from a config section.

    Keys the dataclass does not have are an error (a typo in a config file must not be silently
    ignored), and the dataclass's own checks are re-raised with the config path of the section.
    """
    fields = {f.name for f in dataclasses.fields(cls)}
    values = dict(section.to_dict())
    values.update(extra)
    for key in values:
        if key not in fields:
            raise ConfigError(f"unknown key config.{prefix}.{key} for {cls.__name__}."
                              f"{_suggest(key, fields)} Allowed: {sorted(fields)}")
    try:
        return cls(**values)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"config.{prefix}: {error}") from error


def check_keys(section: ml_collections.ConfigDict, prefix: str, allowed, reader: str) -> None:
    """Raises on a key of config.<prefix> that `reader` (the code that reads the section key by
    key) does not read: a typo in a config file must not be silently ignored."""
    for key in section.keys():
        if key not in allowed:
            raise ConfigError(f"unknown key config.{prefix}.{key}: {reader} reads "
                              f"{sorted(allowed)}.{_suggest(key, allowed)}")


def check_choice(config: ml_collections.ConfigDict, key: str, allowed) -> None:
    """Raises if config.<key> is not one of `allowed`."""
    value = config
    for part in key.split("."):
        value = value[part]
    if value not in allowed:
        raise ConfigError(f"config.{key}={value!r} is not one of {list(allowed)}")


def to_json(config: ml_collections.ConfigDict) -> str:
    return json.dumps(config.to_dict(), indent=2, sort_keys=True, default=list)


@dataclasses.dataclass(frozen=True)
class ConfigFile:
    """An experiment config file as `--help` lists it, read from its source (never run)."""
    path: Path
    summary: str                # the first sentence after the command in its docstring
    variants: dict[str, Any]    # its `:arg` names and their defaults (common.parse_arg's)


def _summary(docstring: str) -> str:
    """The first sentence of the paragraph after the command that opens a config's docstring."""
    paragraphs = [" ".join(p.split()) for p in docstring.split("\n\n") if p.strip()]
    text = paragraphs[1] if len(paragraphs) > 1 else (paragraphs or [""])[0]
    sentence = re.match(r"(.+?[.!?])(?=\s+[A-Z`(]|$)", text)
    return sentence.group(1) if sentence else text


def _literal(node: ast.expr, constants: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name) and node.id in constants:  # DEFAULT = "..." in the module
        return constants[node.id]
    try:
        return ast.literal_eval(node)
    except ValueError:  # an expression: shown as written
        return ast.unparse(node)


def _constants(tree: ast.Module) -> dict[str, Any]:
    """The module's top-level `NAME = literal` and `A, B = literal, literal` assignments."""
    found = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            continue
        if isinstance(target, ast.Name):
            found[target.id] = value
        elif (isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts)
              and isinstance(value, tuple) and len(value) == len(target.elts)):
            found.update(zip((e.id for e in target.elts), value))
    return found


def _variants(get_config: ast.FunctionDef, constants: dict[str, Any]) -> dict[str, Any]:
    """The keywords of the `parse_arg(arg, name=default, ...)` call in get_config, a module
    constant given as a default read as its value."""
    for node in ast.walk(get_config):
        name = getattr(node, "func", None)
        if isinstance(node, ast.Call) and getattr(name, "attr", getattr(name, "id", "")) == "parse_arg":
            return {k.arg: _literal(k.value, constants) for k in node.keywords}
    return {}


def experiment_configs(root: Path) -> list[ConfigFile]:
    """The files under `root` that define get_config (sweep files define get_sweep and helper
    modules neither), in path order."""
    found = []
    for path in sorted(Path(root).rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError) as error:  # --help still lists the others
            found.append(ConfigFile(path, f"(cannot be read: {error})", {}))
            continue
        get_config = next((node for node in tree.body if isinstance(node, ast.FunctionDef)
                           and node.name == "get_config"), None)
        if get_config is not None:
            found.append(ConfigFile(path, _summary(ast.get_docstring(tree) or ""),
                                    _variants(get_config, _constants(tree))))
    return found


def describe_configs(root: Path, shown_from: Path) -> str:
    """The experiment configs under `root`, for `python -m train --help`: each file's path
    (relative to `shown_from`), its summary and its `:arg` variants with their defaults."""
    lines = ["experiment configs (--config FILE[:ARG], ARG: comma-separated variants, defaults",
             "shown; each file's docstring explains them; ablation sweeps: python -m train.sweep):"]
    for config in experiment_configs(root):
        try:
            shown = config.path.relative_to(shown_from)
        except ValueError:
            shown = config.path
        lines.append(f"  {shown}")
        lines += textwrap.wrap(config.summary, width=96, initial_indent=" " * 6,
                               subsequent_indent=" " * 6)
        variants = ", ".join(name if default is False else f"{name}={default!r}"
                             if default == "" else f"{name}={default}"
                             for name, default in config.variants.items())
        if variants:
            lines += textwrap.wrap(f"variants: {variants}", width=96, initial_indent=" " * 6,
                                   subsequent_indent=" " * 16)
    return "\n".join(lines)
