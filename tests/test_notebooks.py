"""The notebooks of notebooks/ are committed executed, and their outputs are what their code makes.

`python notebooks/execute.py` (`make notebooks`) executes them in place at the settings a
reader should see. Here each one runs again, on a copy, at tiny settings (PAPERS_JAX_TINY=1,
read by its parameters cell), and its committed outputs are checked where that is cheap:
  - every notebook: one top-to-bottom run (execution counts 1, 2, ...), no error, no warning,
    no progress-bar redraws, no path of this machine, no cell tags, a few hundred kB; every
    cell shows the same kinds of thing when run as in the committed file, and its
    `[train step N]` / `[eval step N]` log lines the same metric names;
  - every notebook with tiny settings: its full settings (TINY=False) name a config that loads,
    takes the notebook's overrides and passes a start's checks (train/start_checks.py);
  - ablation_results.ipynb: its tables are exactly what train/sweep_compare.py renders from the
    committed records in notebooks/results/.
attention_maps.ipynb needs the pretrained MiniLM (`python -m data.fetch minilm`) and fetches it
itself when it is missing.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient.exceptions import CellExecutionError

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
MAX_BYTES = 400_000  # a notebook with its figures; PNG at 80 dpi, 256 colours (the ablation
# notebook: ten sweeps at 10-50 kB each; split it by paper before it outgrows this)

_spec = importlib.util.spec_from_file_location("notebooks_execute",
                                               REPO / "notebooks" / "execute.py")
execute = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(execute)


def _code_cells(notebook) -> list:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def _texts(cell) -> list[str]:
    """Every text a code cell's outputs show (streams, plain text, markdown, an error)."""
    texts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            texts.append(output.text)
        elif output.output_type == "error":
            texts.append("\n".join(output.traceback))
        else:
            texts += [v for k, v in output.data.items() if k.startswith("text/")]
    return texts


def _kinds(cell) -> set[str]:
    """What a code cell shows: 'stdout', 'stderr', and the mime types of its displays."""
    kinds = set()
    for output in cell.outputs:
        if output.output_type == "stream":
            kinds.add(output.name)
        elif output.output_type != "error":
            kinds |= set(output.data) - {"text/plain"}
    return kinds


_LOG_LINE = re.compile(r"^\[(train|eval) step \d+\] (.*)$", re.MULTILINE)


def _logged_keys(cell) -> dict[str, set[str]]:
    """The `key=` names of a code cell's `[train step N]` and `[eval step N]` log lines
    (train/step_log.py), by kind: a fresh run's values differ from the committed ones, their
    names must not (a metric added to the log since the notebook was executed shows here)."""
    keys: dict[str, set[str]] = {}
    for text in _texts(cell):
        for kind, fields in _LOG_LINE.findall(text):
            keys.setdefault(kind, set()).update(re.findall(r"(?:^| )([\w./-]+)=", fields))
    return keys


def _warnings(notebook) -> list[str]:
    """The lines of a notebook's outputs that warn (absl's WARNING:..., Python's ...Warning:)."""
    return [f"code cell {number} warns: {line}"
            for number, cell in enumerate(_code_cells(notebook), start=1)
            for text in _texts(cell) for line in text.splitlines()
            if re.search("warning", line, re.IGNORECASE)]


def _problems(notebook) -> list[str]:
    """What a reader should not see in a notebook's committed outputs."""
    problems = _warnings(notebook)
    places = {str(REPO): "the repository's path", str(Path.home()): "the home folder",
              tempfile.gettempdir() + "/": "a temporary folder"}
    for number, cell in enumerate(_code_cells(notebook), start=1):
        for output in cell.outputs:
            if output.output_type == "error":
                problems.append(f"code cell {number}: {output.ename}: {output.evalue}")
            elif output.output_type == "stream" and "\r" in output.text:
                problems.append(f"code cell {number}: progress-bar redraws in {output.name}")
        problems += [f"code cell {number} names {what} ({place})" for text in _texts(cell)
                     for place, what in places.items() if place in text]
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_outputs_are_one_clean_run(path):
    assert path.stat().st_size <= MAX_BYTES, f"{path.name}: {path.stat().st_size:,} bytes"
    notebook = nbformat.read(path, as_version=4)
    counts = [cell.execution_count for cell in _code_cells(notebook)]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{path.name} is not committed as one top-to-bottom run (execution counts {counts}): "
        "python notebooks/execute.py " + path.name)
    assert _problems(notebook) == []
    tagged = [(n, c.metadata["tags"]) for n, c in enumerate(notebook.cells)
              if c.metadata.get("tags")]
    assert tagged == [], (f"{path.name}: cells (by index) with tags {tagged}; tags change how a "
                          "notebook runs (skip-execution, raises-exception): remove them")
    for cell in notebook.cells:
        # Jupyter leaves timings ('execution') and collapse or scroll state in metadata.
        assert not set(cell.metadata) & {"execution", "collapsed", "scrolled"}, path.name
    assert "widgets" not in notebook.metadata, path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes_and_shows_what_is_committed(path, tmp_path, monkeypatch):
    """At tiny settings, on a copy: every code cell shows the same kinds of thing (text on
    stdout or stderr, a figure, a table) as in the committed file, which the run leaves as it
    was, and its log lines the same metric names."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's temporary folders (workdirs)
    committed = path.read_bytes()
    fresh = execute.execute(path, tiny=True)
    assert path.read_bytes() == committed
    assert _warnings(fresh) == []
    cells = zip(_code_cells(fresh), _code_cells(nbformat.reads(committed, as_version=4)))
    for number, (ran, saved) in enumerate(cells, start=1):
        assert _kinds(ran) == _kinds(saved), (
            f"{path.name}, code cell {number} shows {sorted(_kinds(ran))} when run, the committed "
            f"file {sorted(_kinds(saved))}: python notebooks/execute.py {path.name}")
        assert _logged_keys(ran) == _logged_keys(saved), (
            f"{path.name}, code cell {number} logs {_logged_keys(ran)} when run, the committed "
            f"file {_logged_keys(saved)}: python notebooks/execute.py {path.name}")


def _parameters_cell(notebook):
    """The code cell that holds a notebook's parameters (a `# Parameters` comment)."""
    (cell,) = [c for c in _code_cells(notebook) if "# Parameters" in c.source]
    return cell


def _parameters(source: str, *, tiny: bool) -> dict:
    """The parameters (upper-case names) a parameters cell sets, evaluated with TINY=`tiny`:
    its top-level assignments to upper-case names alone, so nothing is fetched or created."""
    import os

    names = {"os": os}
    for statement in ast.parse(source).body:
        if not isinstance(statement, ast.Assign) or not all(
                isinstance(t, ast.Name) and t.id.isupper() for t in statement.targets):
            continue
        if [t.id for t in statement.targets] == ["TINY"]:
            names["TINY"] = tiny
        else:
            exec(compile(ast.Module([statement], []), "<parameters>", "exec"), names)
    return names


def _configures(statement: ast.stmt) -> bool:
    """Whether a top-level statement of a notebook makes or changes its training config:
    `config = load_config_file(...)`, `apply_override(config, ...)`, `config.KEY = ...`."""
    def rooted_at_config(node) -> bool:
        while isinstance(node, ast.Attribute):
            node = node.value
        return isinstance(node, ast.Name) and node.id == "config"

    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call = statement.value
        return (isinstance(call.func, ast.Name) and call.func.id == "apply_override"
                and bool(call.args) and rooted_at_config(call.args[0]))
    if isinstance(statement, ast.Assign):
        if [ast.unparse(t) for t in statement.targets] == ["config"]:
            value = statement.value
            return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                    and value.func.id == "load_config_file")
        return all(isinstance(t, ast.Attribute) and rooted_at_config(t) for t in statement.targets)
    return False


def _full_config(notebook):
    """The config a notebook trains at its full settings: its parameters cell evaluated with
    TINY=False, then its code's statements that load and override `config`, in order; None
    for a notebook that loads no config."""
    from train.config import apply_override, load_config_file

    names = {**_parameters(_parameters_cell(notebook).source, tiny=False),
             "load_config_file": load_config_file, "apply_override": apply_override}
    statements = [s for cell in _code_cells(notebook) for s in ast.parse(cell.source).body
                  if _configures(s)]
    if not statements:
        return None
    exec(compile(ast.Module(statements, []), "<config>", "exec"), names)
    return names["config"]


TINY_NOTEBOOKS = [p for p in NOTEBOOKS if any(  # a parameters cell that reads PAPERS_JAX_TINY
    re.search(r"^TINY = ", c.source, re.MULTILINE)
    for c in _code_cells(nbformat.read(p, as_version=4)))]


@pytest.mark.parametrize("path", TINY_NOTEBOOKS, ids=[p.stem for p in TINY_NOTEBOOKS])
def test_full_settings_pass_a_starts_checks(path):
    """The tests run the tiny branch of each parameters cell; the committed outputs come from
    the full one. Here the full settings are evaluated, and the config they name, with the
    notebook's overrides, passes what `python -m train --print_config` checks (the sections'
    keys, the batching against this machine's mesh, the step counts, the optimizer): a
    misspelt variant, key or value there fails in seconds, not in `make notebooks`."""
    from train.start_checks import check_config
    from train.tasks import plan_task

    notebook = nbformat.read(path, as_version=4)
    full, tiny = (_parameters(_parameters_cell(notebook).source, tiny=t) for t in (False, True))
    assert {k: v for k, v in full.items() if k != "TINY"} != {
        k: v for k, v in tiny.items() if k != "TINY"}, f"{path.name}: TINY changes nothing"
    config = _full_config(notebook)
    if "load_config_file(" in "".join(c.source for c in _code_cells(notebook)):
        assert config is not None, f"{path.name} loads a config this test did not find"
    if config is not None:
        assert check_config(config, plan_task(config).model_config) == []


def test_ablation_tables_are_what_the_records_render():
    """Each table in ablation_results.ipynb is the Markdown that train/sweep_compare.py makes
    of the committed records now: a record changed since the notebook was executed, or an
    output edited by hand, shows here."""
    from train.sweep_compare import SWEEPS, load, markdown_table

    notebook = nbformat.read(REPO / "notebooks" / "ablation_results.ipynb", as_version=4)
    (parameters,) = [c for c in notebook.cells if "# Parameters" in c.source]
    (results,) = re.findall(r'^RESULTS = "(.+)"', parameters.source, re.MULTILINE)
    shown = {}
    for cell in _code_cells(notebook):
        for name in re.findall(r'^show\("(\w+)"\)$', cell.source, re.MULTILINE):
            shown[name] = [o.data["text/markdown"] for o in cell.outputs
                           if "text/markdown" in o.get("data", {})]
    assert set(shown) == set(SWEEPS), "the notebook shows every committed sweep, and no other"
    for name, tables in shown.items():
        rendered = markdown_table(name, *load(name, REPO / results), REPO / results)
        assert tables == [rendered], (f"the committed {name} table is not what its records "
                                      "render: python notebooks/execute.py ablation_results.ipynb")


def _without_one_run(results: Path) -> None:
    """A copy of the committed records in `results` with one run's record taken out."""
    import shutil

    shutil.copytree(REPO / "notebooks" / "results", results)
    (results / "bert_table8" / "80-0-20" / "seed_1" / "classify" / "result.json").unlink()


@pytest.mark.parametrize("missing", ["every record", "one run's record"])
def test_ablation_notebook_stops_when_a_sweeps_records_are_missing(tmp_path, missing):
    """A sweep without records, or with one run's record missing, is an error that names what
    is missing and the command making it, not a printed line (or a table a row or seed short)
    in a notebook that then passes."""
    notebook = nbformat.read(REPO / "notebooks" / "ablation_results.ipynb", as_version=4)
    (parameters,) = [c for c in notebook.cells if "# Parameters" in c.source]
    assert 'RESULTS = "notebooks/results"' in parameters.source
    results = tmp_path / "results"
    if missing == "one run's record":
        _without_one_run(results)
    parameters.source = parameters.source.replace('"notebooks/results"', repr(str(results)))
    with pytest.raises(CellExecutionError) as error:
        execute.run(notebook, tiny=True)
    assert error.value.ename == "FileNotFoundError"
    if missing == "every record":
        assert ("python -m train.sweep --config configs/ablations/vit_posemb.py"
                in error.value.evalue)
    else:
        assert ("has no finished record of 1 of the sweep's 21 runs (80-0-20 seed 1): `python -m "
                "train.sweep --config configs/ablations/bert_table8.py --workdir "
                "workdirs/bert_table8`") in error.value.evalue
