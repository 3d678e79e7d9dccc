"""Executes the notebooks in place, at the settings a reader should see: they are committed with
their outputs, so that the repository page shows their tables and figures before anyone runs them.

    python notebooks/execute.py                        # every notebook (`make notebooks`)
    python notebooks/execute.py quickstart.ipynb ...   # some of them

Each notebook runs top to bottom in one fresh kernel, from the repository root, on the CPU (what a
reader has), every cell whatever its tags, stopping at the first error; it is written back with its
outputs. Its metadata stays as it was and its cells get no timing metadata, so that a re-run
changes only what the code computes. A cell's printed text is kept as Jupyter shows it: a run of
text on one stream in one piece, a progress bar at its last state rather than every redraw. Figures
are PNG at 80 dpi (the dpi of notebooks/figures/, train/sweep_figures.py), stored with a palette of
256 colours: a quarter of the bytes, which keeps a notebook to a few hundred kB. The kernel talks
to this process over IPC sockets: over TCP it warns that its traffic is unencrypted.

tests/test_notebooks.py runs `execute` with `tiny=True` on copies (PAPERS_JAX_TINY=1, which
each notebook's parameters cell reads to shrink what it computes) and checks the committed
outputs against the code.
"""

from __future__ import annotations

import argparse
import base64
import copy
import io
import os
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from PIL import Image
from traitlets.config import Config

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
DPI = 80
_REDRAWN = re.compile(r".*\r(?=[^\n])")  # a line's text up to a "\r" that starts it again


def _palette_png(data: str) -> str:
    """A base64 PNG (a matplotlib figure: RGBA) re-encoded with a palette of 256 colours."""
    image = Image.open(io.BytesIO(base64.b64decode(data))).convert("RGBA")
    out = io.BytesIO()
    image.quantize(256, method=Image.Quantize.FASTOCTREE).save(out, "PNG", optimize=True)
    return base64.b64encode(out.getvalue()).decode("ascii")


def _as_shown(outputs: list) -> list:
    """A cell's outputs as Jupyter shows them: a run of text on one stream in one piece, a line
    redrawn after a carriage return (a progress bar) at its last state; figures re-encoded."""
    shown = []
    for output in outputs:
        if output.output_type == "stream":
            if shown and shown[-1].output_type == "stream" and shown[-1].name == output.name:
                shown[-1].text += output.text
                continue
        elif "image/png" in output.get("data", {}):
            output.data["image/png"] = _palette_png(output.data["image/png"])
        shown.append(output)
    for output in shown:
        if output.output_type == "stream":
            output.text = _REDRAWN.sub("", output.text)
    return shown


def run(notebook: nbformat.NotebookNode, *, tiny: bool, timeout: int = 900) -> None:
    """Executes `notebook` in place: tiny settings when `tiny`, else the committed ones.
    Raises nbclient's CellExecutionError when a cell fails."""
    metadata = copy.deepcopy(notebook.metadata)
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               MPLBACKEND="module://matplotlib_inline.backend_inline",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("PAPERS_JAX_TINY", None)
    if tiny:
        env["PAPERS_JAX_TINY"] = "1"
    client = NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", record_timing=False,
        # nbclient's defaults honour cell tags: "skip-execution" keeps a cell's old outputs,
        # "raises-exception" lets it fail. Here every cell runs ("" is no valid tag) and any
        # error raises.
        skip_cells_with_tag="", force_raise_errors=True,
        resources={"metadata": {"path": str(REPO)}},
        extra_arguments=[f"--InlineBackend.rc={{'figure.dpi': {DPI}}}"],
        config=Config({"KernelManager": {"transport": "ipc"}}))
    client.execute(env=env)
    notebook.metadata = metadata  # the kernel's version details are not the notebook's
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = _as_shown(cell.outputs)


def execute(path: Path, *, tiny: bool) -> nbformat.NotebookNode:
    """The notebook at `path`, executed; the file is left as it is."""
    notebook = nbformat.read(path, as_version=4)
    run(notebook, tiny=tiny)
    return notebook


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python notebooks/execute.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NOTEBOOK",
                        help="file names in notebooks/ (default: all)")
    args = parser.parse_args(argv)
    paths = [NOTEBOOKS / name for name in args.names] or sorted(NOTEBOOKS.glob("*.ipynb"))
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        print(f"error: no notebook {', '.join(missing)} in {NOTEBOOKS}", file=sys.stderr)
        return 2
    for path in paths:
        start = time.perf_counter()
        notebook = execute(path, tiny=False)
        nbformat.write(notebook, path)
        print(f"{path.relative_to(REPO)}: executed in {time.perf_counter() - start:.0f} s, "
              f"{path.stat().st_size / 1e3:.0f} kB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
