"""Every notebook in notebooks/ runs top to bottom, at tiny settings, and is committed clean.

The notebooks read PAPERS_JAX_TINY=1 (set here) in their parameters cell and shrink what they
compute; run by hand they use their full settings. attention_maps.ipynb needs the pretrained
MiniLM (`python -m data.fetch minilm`) and fetches it itself when it is missing.
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_notebooks_are_committed_without_outputs():
    assert NOTEBOOKS
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, path.name
            # Execution leaves timings ('execution') and widget or collapse state in metadata.
            assert not set(cell.metadata) & {"execution", "collapsed", "scrolled"}, path.name
        assert "widgets" not in notebook.metadata, path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("PAPERS_JAX_TINY", "1")
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO)}}).execute()
    print(f"{path.name}: {time.perf_counter() - start:.1f} s")


def test_ablation_notebook_stops_when_a_sweeps_records_are_missing(tmp_path, monkeypatch):
    """A sweep without records is an error that names the command making them, not a printed
    line in a notebook that then passes with nothing shown."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    notebook = nbformat.read(REPO / "notebooks" / "ablation_results.ipynb", as_version=4)
    (parameters,) = [c for c in notebook.cells if "# Parameters" in c.source]
    assert 'RESULTS = "notebooks/results"' in parameters.source
    parameters.source = parameters.source.replace('"notebooks/results"', repr(str(tmp_path)))
    with pytest.raises(CellExecutionError) as error:
        NotebookClient(notebook, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(REPO)}}).execute()
    assert error.value.ename == "FileNotFoundError"
    assert "python -m train.sweep --config configs/ablations/vit_posemb.py" in error.value.evalue
