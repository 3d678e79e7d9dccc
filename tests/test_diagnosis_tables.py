"""train/diagnosis_tables.py renders the committed diagnosis records: each declared checkpoint's
last-layer numbers, a fine-tuning run's final eval, and what is not recorded named as such."""

from __future__ import annotations

import json
import shutil

from train import diagnosis_tables
from train import result_tables as rt

FOLDER = rt.RESULTS / diagnosis_tables.FOLDER


def _cells(table: str, first: str, second: str) -> list[str]:
    """The cells of the row whose first two cells are `first` and `second`."""
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:2] == [first, second]:
            return cells
    raise AssertionError(f"no row {first!r} {second!r} in:\n{table}")


def test_tables_read_the_declared_checkpoints_and_name_what_is_missing(tmp_path):
    results = tmp_path / "results"
    (results / diagnosis_tables.FOLDER).mkdir(parents=True)
    shutil.copy(FOLDER / "0-0-100_seed0.json", results / diagnosis_tables.FOLDER)
    records = rt.Records(results)

    collapse = diagnosis_tables.collapse_table(records)
    (run,) = json.loads((FOLDER / "0-0-100_seed0.json").read_text())["runs"]
    last = next(c for c in run["checkpoints"] if c["step"] == 1000)["pretrain"]["layers"][-1]
    cells = _cells(collapse, "0-0-100", "1000")
    assert f"{last['states']['effective_rank']:.1f}" in cells
    assert f"{last['states']['identity_readout']:.3f}" in cells
    assert "Not recorded: `80-10-10_seed0` step 50" in collapse
    assert "python -m train.diagnose_encoder" in collapse

    finetune = diagnosis_tables.finetune_table(records)
    row = next(line for line in finetune.splitlines() if line.startswith("| 0-0-100 after 1,000"))
    assert row.endswith("| (not recorded) | (not recorded) |")   # no fine-tuning records here
    assert "Not recorded: `80-10-10_seed0` step 250" in finetune

    shutil.copytree(FOLDER / "finetune", results / diagnosis_tables.FOLDER / "finetune")
    record = json.loads((FOLDER / "finetune" / "0-0-100_seed0_step1000" / "record.json")
                        .read_text())
    row = next(line for line in diagnosis_tables.finetune_table(records).splitlines()
               if line.startswith("| 0-0-100 after 1,000"))
    assert rt.percent(record["metrics"]["eval"]["token_accuracy"], 1) in row


def test_the_tables_say_when_where_and_from_which_code_each_record_was_made(tmp_path):
    """A diagnosis from before diagnoses recorded it is named as such; one that records it has
    its date, machine and commit (uncommitted changes said); so are fine-tuning records made
    with uncommitted changes."""
    results = tmp_path / "results"
    folder = results / diagnosis_tables.FOLDER
    folder.mkdir(parents=True)
    shutil.copy(FOLDER / "0-0-100_seed0.json", folder)
    document = json.loads((FOLDER / "80-10-10_seed0.json").read_text())
    document.update(date="2026-12-01T10:00:00+00:00",
                    code={"commit": "0123456789abc", "dirty": True},
                    machine={"cpu": "AMD EPYC", "usable_cpus": 2, "cpu_count": 2})
    (folder / "80-10-10_seed0.json").write_text(json.dumps(document))
    shutil.copytree(FOLDER / "finetune", folder / "finetune")
    table = diagnosis_tables.finetune_table(rt.Records(results))
    assert ("`0-0-100_seed0.json`: no date, machine or code version (made before diagnoses "
            "recorded them). `80-10-10_seed0.json`: 2026-12-01, AMD EPYC (2 of 2 cores), code "
            "0123456789 with uncommitted changes.") in table
    dirty = [p.parent.name for p in (folder / "finetune").glob("*/record.json")
             if json.loads(p.read_text())["code"]["dirty"] is True]
    assert dirty and all(f"`bert_table8_diagnosis/finetune/{name}/record.json`" in table
                         for name in dirty)
    assert "Fine-tuning records made with uncommitted changes to their code: " in table


def test_with_no_records_the_tables_say_so(tmp_path):
    records = rt.Records(tmp_path)
    assert "holds no diagnosis" in diagnosis_tables.collapse_table(records)
