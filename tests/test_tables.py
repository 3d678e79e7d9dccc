"""python -m train.tables: every table of the docs is rendered from committed records, and the
docs hold exactly what their records render."""

from __future__ import annotations

import csv
import json
import math
import shutil
import statistics
from pathlib import Path

import pytest

from train import result_tables as rt, run_record, tables
from train.headline_runs import RUNS
from train.result_tables import Records
from train.sweep_compare import SWEEPS, CommittedSweep, load, markdown_table
from train.sweep_report import collect, summarize, write_csv, write_markdown
from train.sweep_spec import load_sweep_file

REPO = Path(__file__).resolve().parents[1]
T0 = 1_800_000_000  # a whole second, so the sessions' ISO times are exact


def _save(results: Path, name: str, kind: str, config: dict, metrics: dict, wall_s: float):
    """A finished record under results/runs/NAME, of one session [T0, T0 + wall_s]."""
    session = {"command": RUNS[name].argv, "started": run_record.utc_iso(T0),
               "ended": run_record.utc_iso(T0 + wall_s), "wall_s": wall_s, "start_step": 0,
               "end_step": metrics.get("eval_step"), "outcome": "finished",
               "machine": run_record.machine(2e11, "measured"), "code": {"commit": "a" * 40,
                                                                       "dirty": False},
               "versions": run_record.versions()}
    record = run_record.make(kind, config=config, metrics=metrics, sessions=[session],
                             finished=True)
    run_record.write(results / "runs" / name / "record.json", record)


def _train(eval_values: dict, step: int, evals=None, train=None, split="test", params=1000):
    evals = evals or [{"step": step, "time": T0 + 10, **eval_values}]
    return {"eval": eval_values, "eval_split": split, "eval_step": step, "train": train or {},
            "train_step": step, "evals": evals, "parameters": params}


def test_single_run_tables_show_their_records_numbers(tmp_path):
    fast = {"steps_per_second": 7.04, "mfu": 0.4123}
    _save(tmp_path, "demo", "train", {"data": {"batch_size": 128}, "model": {"name": "vit"}},
          _train({"accuracy": 0.90453, "loss": 0.2812}, 5900, train=fast, evals=[
              {"step": s, "time": T0 + s / 7, "accuracy": 0.9, "loss": 0.3}
              for s in (2000, 4000, 5900)]), 857.4)
    _save(tmp_path, "translate", "train", {"model": {"posemb": "sinusoidal"}},
          _train({"bleu": 27.364, "perplexity": 10.123, "accuracy": 0.5301}, 1286, train=fast,
                 params=7_577_600), 3608)
    _save(tmp_path, "bert_pretrain", "train", {}, _train(
        {"mlm_accuracy": 0.291, "nsp_accuracy": 0.842, "mlm_loss": 4.0}, 4200, split="validation",
        evals=[{"step": s, "time": T0 + t, "mlm_accuracy": a, "nsp_accuracy": 0.7, "mlm_loss": 4}
               for s, t, a in ((1000, 600, 0.228), (4200, 2400, 0.291))]), 2407)
    _save(tmp_path, "finetune_spam", "train", {"data": {"name": "spam", "batch_size": 32}},
          _train({"accuracy": 0.961}, 100, train={"epochs": 0.6634}), 565)
    _save(tmp_path, "baselines", "baselines", {}, {"eval_split": "test", "eval": {
        "spam": {"majority": {"accuracy": 0.692}, "bow_logreg": {"accuracy": 0.987, "l2": 1e-4,
                                                                 "features": 20_000}},
        "brown_pos": {"majority_tag": {"token_accuracy": 0.9405, "unseen_accuracy": 0.5,
                                       "unseen_fraction": 0.02}}}}, 60)
    _save(tmp_path, "bench_bert_base", "benchmark", {},
          {"rows": [{"label": "ours", "mfu": 0.587}, {"label": "transformers 4.57.6",
                                                      "mfu": 0.61}],
           "ratios": {"standard step (peer time / ours)": 1.153},
           "table": "**bert base**, batch 8\n\n| a |\n|---|"}, 100)
    render = {name: table(Records(tmp_path)) for name, table in tables.TABLES.items()}

    assert render["demo"].startswith("**90.45% test accuracy in 14:17** (5,900 steps of 128 "
                                     "images at 7.0 steps/s")
    assert "evals at steps 2,000 / 4,000 / 5,900" in render["demo"]
    assert "| `configs/vit/fashion_mnist.py` | 5,900 x 128 | 90.45% | 0.2812 | 14:17 | 7.04 | " \
           "41.2% |" in render["demo"]
    assert ("| `translate` | `default` | sinusoidal | 7,577,600 | 1,286 | 1:00:08 | 27.36 | "
            "10.12 | 53.0% | 7.04 | 41.2% |") in render["translation"]
    assert f"(not recorded yet: `python -m data.fetch bible_en_es && " \
           f"{RUNS['translate_row_E'].command}`, then `{RUNS['translate_row_E'].save_command}`)" \
           in render["translation"]
    assert "| 1,000 | 10:00 | 22.8% | 70.0% |" in render["bert_pretraining"]
    assert "| 4,200 (end) | 40:07 | 29.1% | 70.0% |" in render["bert_pretraining"]
    assert "validation MLM accuracy" in render["bert_pretraining"]
    assert ("| spam | `task=spam,init=minilm` | 100 x 32 (0.66) | 9:25 | 96.10% | 69.2% | "
            "98.7% |") in render["finetuning"]
    assert "`finetune_tweets`: (not recorded yet" in render["finetuning"]
    assert "| brown_pos | - | most frequent tag per word: 94.05% token accuracy" in \
           render["baselines"]
    assert render["bench_bert_base"].startswith("**bert base**, batch 8\n\n| a |")
    assert "`bench_vit_b16`: (not recorded yet" in render["bench_vit_b16"]
    headline = render["headline"]
    load = f"{Records(tmp_path).get('demo')['machine']['load_average'][2]:.1f} on "
    assert ("| ViT on Fashion-MNIST (`make demo`) | 90.45% test accuracy | 14:17 | " + load
            ) in headline
    assert (" cores | [demo](notebooks/results/runs/demo/record.json) | [results](docs/results.md) |"
            ) in headline
    assert "| 27.36 test BLEU | 1:00:08 |" in headline
    assert "| MLM 29.1%, NSP 84.2% (validation) | 40:07 |" in headline
    assert "| 96.10% accuracy (test) | 9:25 |" in headline
    assert "| MFU 58.7%, 1.15x the Hugging Face step | - |" in headline
    assert "not recorded yet: `python -m train --config configs/transformer/translate.py:row=E" \
           in headline
    for name in ("demo", "translation", "bert_pretraining", "finetuning", "baselines",
                 "bench_bert_base"):
        assert "Recorded in `notebooks/results/runs/`" in render[name], name
        assert "code aaaaaaaaaa, jax " in render[name], name


def test_without_records_every_table_says_how_to_make_them(tmp_path):
    """...but docs/launch.md's estimates, which come from the recipes' configs and the FLOPs
    model, records or none (train/recipe_costs.py); its measured table names the records it
    lacks beside the estimates."""
    records = Records(tmp_path)
    for name, table in tables.TABLES.items():
        text = table(records)
        if name == "launch_measured":
            assert "`bench_gpu_vit_b16`: not recorded yet" in text
            assert text != table(Records())
            continue
        if name.startswith("launch_"):
            assert text == table(Records()), name
            continue
        assert ("not recorded yet" if name != "headline_runs" else "| not yet |") in text, name
        assert "%" not in text.replace("% of", ""), name  # no number where a record is missing
    for run in RUNS.values():
        assert run.save_command in tables.TABLES["headline_runs"](records)
    assert ("(not recorded yet: `python -m train.sweep --config configs/ablations/vit_posemb.py "
            "--workdir workdirs/vit_table8`") in tables.TABLES["sweep_vit_table8"](records)


def test_the_docs_hold_what_their_records_render():
    differing = tables.update(tables.default_files(), Records(), write=False)
    assert not differing, ("these tables differ from what their records render (edited by hand, "
                           "or the records changed); `python -m train.tables` renders them "
                           "again:\n" + "\n".join(differing))
    assert REPO / "docs" / "results.md" in tables.default_files()
    text = "".join(path.read_text() for path in tables.default_files())
    for name in tables.TABLES:  # every table is shown somewhere
        assert f"<!-- table: {name} -->" in text, name


def test_a_table_edited_by_hand_is_found_and_rendered_again(tmp_path, capsys):
    page = tmp_path / "reproductions.md"
    shutil.copy(REPO / "docs" / "reproductions.md", page)
    original = page.read_text()
    edited = original.replace("| `learned_1d` | 3 | 86.26 ± 0.55 |",
                              "| `learned_1d` | 3 | 88.26 ± 0.55 |")
    assert edited != original
    page.write_text(edited)
    assert tables.main([str(page), "--check"]) == 1
    out = capsys.readouterr().out
    assert f"{page}: table 'sweep_vit_table8' differs from its records; `python -m train.tables`" \
           in out and "demo" not in out
    assert page.read_text() == edited  # --check writes nothing
    assert tables.main([str(page)]) == 0
    assert page.read_text() == original


def test_a_results_folder_or_file_that_cannot_be_read_is_refused_and_nothing_written(
        tmp_path, capsys):
    """A mistyped --results would render every number as 'not recorded yet': refused, as is a
    folder without runs/; a missing or non-UTF-8 FILE is an error line, and the files before it
    stay as they were."""
    page = tmp_path / "reproductions.md"
    shutil.copy(REPO / "docs" / "reproductions.md", page)
    edited = page.read_text().replace("| `learned_1d` | 3 | 86.26 ± 0.55 |",
                                      "| `learned_1d` | 3 | 88.26 ± 0.55 |")
    page.write_text(edited)
    (tmp_path / "empty").mkdir()
    (tmp_path / "binary.md").write_bytes(b"\xff\xfe<!-- table: demo -->\n")
    for argv, message in (
            (["--results", str(tmp_path / "mistyped")],
             f"error: --results {tmp_path / 'mistyped'} does not exist: give the folder of the "
             "committed records"),
            (["--results", str(tmp_path / "empty")],
             f"error: --results {tmp_path / 'empty'} holds no runs/ folder"),
            (["--results", str(page)], f"error: --results {page} is not a folder"),
            ([str(tmp_path / "absent.md")], f"error: {tmp_path / 'absent.md'} does not exist: "
                                            "give Markdown files that do"),
            ([str(tmp_path / "binary.md")],
             f"error: {tmp_path / 'binary.md'} is not UTF-8 text (byte 0: invalid start byte)")):
        assert tables.main([str(page), *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(message) and len(err.splitlines()) == 1, err
        assert page.read_text() == edited  # nothing written
    assert tables.main([str(page), "--results", str(rt.RESULTS)]) == 0
    assert page.read_text() != edited


@pytest.mark.parametrize("text, message", [
    ("<!-- table: nosuch -->\n<!-- /table -->\n", r"x.md:1: no table 'nosuch'; the tables: demo,"),
    ("a\n<!-- table: demo -->\n| 1 |\n", r"x.md:2: table 'demo' has no <!-- /table -->"),
    ("<!-- table: demo -->\n<!-- table: demo -->\n<!-- /table -->\n",
     "x.md:1: table 'demo' has no"),
    ("text\n<!-- /table -->\n", r"x.md:2: <!-- /table --> without a table opened before it"),
])
def test_malformed_markers_are_errors_that_name_the_line(text, message):
    with pytest.raises(tables.TableError, match=message):
        tables.render_text(text, "x.md", lambda name: "")


def _cells(text: str) -> dict[str, list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("| `") or line.startswith("| **")]
    return {row.split("|")[1].strip(" *`"): [c.strip() for c in row.split("|")[2:-1]]
            for row in rows}


def test_a_sweep_table_is_the_paired_comparison_of_its_runs():
    """Independently of train/sweep_compare.py: the mean, sample std, and paired change ± s.e.
    from the committed results.csv, in the rendered table."""
    with open(REPO / "notebooks" / "results" / "vit_table8" / "results.csv") as file:
        table = list(csv.DictReader(file))
    by_row = {}
    for line in table:
        by_row.setdefault(line["row"], {})[int(line["seed"])] = 100 * float(line["accuracy"])
    cells = _cells(tables.TABLES["sweep_vit_table8"](Records()))
    assert list(cells) == list(by_row)
    for row, seeds in by_row.items():
        values = [seeds[k] for k in sorted(seeds)]
        assert cells[row][0] == str(len(values))
        assert cells[row][1] == f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"
        if row != "none":
            d = [seeds[k] - by_row["none"][k] for k in sorted(seeds)]
            se = statistics.stdev(d) / math.sqrt(len(d))
            assert cells[row][2] == f"{statistics.mean(d):+.2f} ± {se:.2f}", row


def test_a_sweep_table_without_a_reference_row_has_no_change_columns(tmp_path):
    """DistilBERT Table 1's rows are tasks, each student judged against its own teacher: the
    table sets the paper's share beside each row's, with no Δ from another row."""
    folder = "distilbert_table1"
    assert SWEEPS[folder].reference is None
    shares = {"spam": [0.99, 0.98, 1.0], "tweets": [0.95, 0.96, 0.94],
              "brown_pos": [0.97, 0.975, 0.965]}
    for row, values in shares.items():
        for seed, share in enumerate(values):
            path = tmp_path / folder / row / f"seed_{seed}" / "student" / "result.json"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps({"metrics": {"score_of_teacher": share,
                                                    "score": 0.9 * share, "teacher_score": 0.9},
                                        "wall_s": 60.0}))
    text = tables.TABLES[f"sweep_{folder}"](Records(tmp_path))
    head = text.splitlines()[0]
    assert "Δ" not in text and "paper score_of_teacher |" in head
    cells = _cells(text)
    assert list(cells) == list(shares)
    for row, values in shares.items():
        percent = [100 * v for v in values]
        assert cells[row][:3] == ["3", f"{statistics.mean(percent):.2f} ± "
                                       f"{statistics.stdev(percent):.2f}",
                                  f"{100 * 77.0 / 79.5:.2f}"], row
        assert cells[row][4] == "90.00 ± 0.00"  # the teacher's score, every seed the same


def test_an_equal_wall_clock_sweep_shows_each_rows_wall_time_over_its_stages(tmp_path,
                                                                            monkeypatch):
    """The MAE pipeline and the ViT from scratch are compared at equal wall clock: the table
    shows each row's measured minutes per seed, pretraining and fine-tuning added, so a reader
    sees how equal the budgets came out (a sweep compared per step shows none)."""
    folder = "mae_pipeline"
    monkeypatch.setitem(SWEEPS, folder, CommittedSweep(folder, "configs/ablations/mae_pipeline.py",
                                                       "scratch", wall_clock=True))
    walls = {"mae": [(1400.0, 5500.0), (1380.0, 5560.0)],
             "scratch": [(26.0, 6900.0), (27.0, 6960.0)]}
    for row, seeds in walls.items():
        for seed, stages in enumerate(seeds):
            for stage, wall in zip(("pretrain", "finetune"), stages):
                metrics = ({"pixel_mse": 0.2, "loss": 0.2} if stage == "pretrain" else
                           {"accuracy": 0.9 - 0.01 * seed})
                path = tmp_path / folder / row / f"seed_{seed}" / stage / "result.json"
                path.parent.mkdir(parents=True)
                path.write_text(json.dumps({"metrics": metrics, "wall_s": wall}))
    text = markdown_table(folder, *load(folder, tmp_path), tmp_path)
    assert text.splitlines()[0].endswith("| wall time per seed (min) |")
    assert "Wall time: each run's measured total over its stages" in text
    cells = _cells(text)
    for row, seeds in walls.items():
        minutes = [sum(stages) / 60 for stages in seeds]
        assert cells[row][-1] == (f"{statistics.mean(minutes):.1f} ± "
                                  f"{statistics.stdev(minutes):.1f}"), row
    assert "wall time" not in tables.TABLES["sweep_mae_table1"](Records()).splitlines()[0]


def test_a_sweep_table_with_runs_missing_says_which(tmp_path):
    """A sweep in progress (or a record deleted) renders the runs it has and names the ones it
    has not, so the table never reads as complete when it is not."""
    folder = "bert_table8"
    shutil.copytree(REPO / "notebooks" / "results" / folder, tmp_path / folder)
    shutil.rmtree(tmp_path / folder / "80-20-0" / "seed_1")
    shutil.rmtree(tmp_path / folder / "untrained")
    text = tables.TABLES[f"sweep_{folder}"](Records(tmp_path))
    cells = _cells(text)
    assert cells["80-20-0"][0] == "2" and "untrained" not in cells
    assert ("Not recorded yet, so not in the table: 80-20-0 seed 1, untrained seed 0, untrained "
            "seed 1, untrained seed 2.") in text
    assert "Not recorded yet" not in tables.TABLES[f"sweep_{folder}"](Records())


def test_a_sweep_table_names_the_cores_each_run_had(tmp_path):
    """Runs pinned one to a core (two at a time on a 2-core machine) and runs on every core are
    told apart under the table: the records' usable cores of the machine's."""
    folder = "vit_table8"
    shutil.copytree(REPO / "notebooks" / "results" / folder, tmp_path / folder)
    path = next(p for p in sorted((tmp_path / folder).glob("*/seed_*/*/result.json"))
                if "record" in json.loads(p.read_text()))
    result = json.loads(path.read_text())
    machine = result["record"]["machine"]
    machine["usable_cpus"] = 1
    path.write_text(json.dumps(result))
    text = tables.TABLES[f"sweep_{folder}"](Records(tmp_path))
    cpu, count = machine["cpu"], machine["cpu_count"]
    assert f"{cpu} (1 of {count} cores, cpu), {cpu} ({count} of {count} cores, cpu)" in text


@pytest.mark.parametrize("folder", list(SWEEPS))
def test_the_committed_sweep_reports_are_their_runs_records(folder, tmp_path):
    """results.csv and results.md beside a sweep's runs are what `python -m train.sweep
    --report_only` writes from the runs' result.json, not typed in."""
    config = SWEEPS[folder].config
    sweep = load_sweep_file(str(REPO / config))
    directory = REPO / "notebooks" / "results" / folder
    records = collect(sweep, directory)
    write_csv(sweep, records, tmp_path / "results.csv")
    write_markdown(sweep, summarize(sweep, records), config, tmp_path / "results.md")
    for name in ("results.csv", "results.md"):
        assert (tmp_path / name).read_text() == (directory / name).read_text(), (
            f"{directory / name} differs from its runs' result.json: `python -m train.sweep "
            f"--config {config} --workdir {directory} --report_only` writes it")


def test_the_language_model_table_sets_the_lm_beside_kneser_ney(tmp_path):
    """One LM and one trigram per vocabulary size, each row naming its own size and peak
    learning rate, read from its own record (a v1024 row showing v4096's numbers would pass a
    table without the column)."""
    for name, vocab, lr, ppl, bpb, mfu, wall in (
            ("lm_english", 4096, 3e-3, 41.237, 1.40213, 0.2351, 1750),
            ("lm_english_v1024", 1024, 1.5e-3, 17.5, 1.3877, 0.301, 1790),
            ("lm_english_v512", 512, 3e-3, 12.25, 1.5001, 0.312, 1795)):
        _save(tmp_path, name, "train", {"data": {"batch_size": 32, "max_length": 128,
                                                 "vocab_size": vocab},
                                        "optimizer": {"learning_rate": lr}},
              _train({"perplexity": ppl, "bits_per_byte": bpb}, 2000, split="validation",
                     train={"mfu": mfu}, params=1_334_016 - (4096 - vocab) * 128), wall)
    for name, vocab, tokens, ppl, bpb in (("lm_kneser_ney", 4096, 6_300_000, 59.82, 1.5373),
                                          ("lm_kneser_ney_v1024", 1024, 8_700_000, 23.69, 1.638),
                                          ("lm_kneser_ney_v512", 512, 11_000_000, 14.96, 1.798)):
        _save(tmp_path, name, "baselines", {"data": {"vocab_size": vocab}}, {
            "eval_split": "validation", "eval": {"order": 3, "discounts": "modified",
                                                 "train_tokens": tokens, "perplexity": ppl,
                                                 "bits_per_byte": bpb}}, 42)
    text = tables.TABLES["language_model"](Records(tmp_path))
    assert ("| decoder-only Transformer (`configs/lm/english.py`) | 4,096 | 1,334,016 | "
            "2,000 x 32 x 128 | 0.003 | 29:10 | 41.24 | 1.4021 | 23.5% |") in text
    assert ("| interpolated Kneser-Ney 3-gram (modified discounts) | 4,096 | - | 6,300,000 "
            "training tokens counted | - | 0:42 | 59.82 | 1.5373 | - |") in text
    assert ("| decoder-only Transformer (`configs/lm/english.py:vocab=1024`) | 1,024 | 940,800 "
            "| 2,000 x 32 x 128 | 0.0015 | 29:50 | 17.50 | 1.3877 | 30.1% |") in text
    assert ("| interpolated Kneser-Ney 3-gram (modified discounts) | 1,024 | - | 8,700,000 "
            "training tokens counted | - | 0:42 | 23.69 | 1.6380 | - |") in text
    assert ("| decoder-only Transformer (`configs/lm/english.py:vocab=512`) | 512 | 875,264 "
            "| 2,000 x 32 x 128 | 0.003 | 29:55 | 12.25 | 1.5001 | 31.2% |") in text
    assert ("| interpolated Kneser-Ney 3-gram (modified discounts) | 512 | - | 11,000,000 "
            "training tokens counted | - | 0:42 | 14.96 | 1.7980 | - |") in text
    assert "validation perplexity (per BPE token)" in text and "not recorded yet" not in text


def test_the_image_classifier_table_reads_each_row_from_its_own_record(tmp_path):
    """The demo's ViT beside DeiT's convnet teacher: each row's model, size and accuracy are its
    record's (a teacher row showing the demo's numbers would pass a table of one row)."""
    for name, model, params, acc, loss, wall in (("demo", "vit", 766_634, 0.9058, 0.2661, 2903),
                                                 ("convnet_teacher", "convnet", 175_000, 0.9212,
                                                  0.2204, 3000)):
        _save(tmp_path, name, "train", {"data": {"batch_size": 128}, "model": {"name": model}},
              _train({"accuracy": acc, "loss": loss}, 5900, params=params,
                     train={"steps_per_second": 2.0, "mfu": 0.33}), wall)
    text = tables.TABLES["image_classifiers"](Records(tmp_path))
    assert ("| `demo` | `configs/vit/fashion_mnist.py` | vit | 766,634 | 5,900 x 128 | 90.58% | "
            "0.2661 | 48:23 | 2.00 | 33.0% |") in text
    assert ("| `convnet_teacher` | `configs/vit/convnet_teacher.py` | convnet | 175,000 | "
            "5,900 x 128 | 92.12% | 0.2204 | 50:00 | 2.00 | 33.0% |") in text
    assert "test accuracy" in text and "not recorded yet" not in text


def test_provenance_names_a_data_sheet_peak_as_such():
    """A GPU record's MFU is against the data-sheet peak, not a matmul measured in the run."""
    def record(peak, source):
        return {"machine": {**run_record.machine(peak, source), "load_average": None},
                "code": {"commit": "b" * 40, "dirty": False}, "date": "2026-11-27T00:00:00",
                "versions": {"jax": "0.11.2"}}

    gpu = rt.provenance({"g": record(989e12, "NVIDIA H100 80GB HBM3 dense bf16 data sheet")})
    cpu = rt.provenance({"c": record(1.4e11, "best float32 2048^3 matmul measured in this run")})
    assert "data-sheet peak 989.0 TFLOP/s per device" in gpu and "matmul" not in gpu
    assert "matmul peak 140 GFLOP/s per device" in cpu


def test_a_sweep_without_paper_numbers_shows_every_metric_change_from_its_reference():
    """MAE limited labels has no paper numbers: each metric still gets its Δ column against
    `untrained`, the mean of the per-seed differences ± their standard error, computed here
    from the committed result.json files (a table with no Δ at all would pass a header check)."""
    folder = "mae_limited_labels"
    sweep, runs = load(folder)
    text = markdown_table(folder, sweep, runs)
    head = text.splitlines()[0]
    assert head.count("Δ vs `untrained` ± s.e.") == 3 and "paper" not in head
    directory = REPO / "notebooks" / "results" / folder

    def accuracy(row: str, seed: int) -> float:
        path = directory / row / f"seed_{seed}" / "labels_10pct" / "result.json"
        return json.loads(path.read_text())["metrics"]["accuracy"]

    d = [100 * (accuracy("mae", k) - accuracy("untrained", k)) for k in range(3)]
    expected = f"{statistics.mean(d):+.2f} ± {statistics.stdev(d) / math.sqrt(3):.2f}"
    mae_row = next(line for line in text.splitlines() if line.startswith("| **`mae`**")
                   or line.startswith("| `mae`"))
    assert mae_row.split(" | ")[5] == expected, (mae_row, expected)


def test_a_paper_number_without_one_on_the_reference_row_has_no_paper_change():
    """DeiT Table 3 gives the distillation token's class and distillation heads but nothing of
    the kind for the reference row: their paper cells show the number alone, not a KeyError."""
    from types import SimpleNamespace

    from train.sweep_compare import paper_change

    paper = {"none": {"accuracy": 0.818}, "token": {"accuracy": 0.834, "class_accuracy": 0.83}}
    sweep = SimpleNamespace(paper=paper, paper_reference={})
    assert paper_change("accuracy", sweep, "token", "none") == pytest.approx(1.6)
    assert math.isnan(paper_change("class_accuracy", sweep, "token", "none"))
    assert math.isnan(paper_change("accuracy", sweep, "other", "none"))


def test_a_rows_paper_change_starts_from_its_own_baseline_in_the_paper():
    """MAE Table 1: our default is the paper's Table 1d normalised-pixel row (85.4 / 73.9), but
    its decoder-depth rows (1a) and mask-token row (1c) change the unnormalised 84.9 / 73.5 (2
    blocks: 70.0): each paper change is the paper's own, not 1d's gain added to it."""
    from configs.ablations import mae_table1
    from train.sweep_compare import paper_change

    sweep = mae_table1.get_sweep()
    for row, fine_tuned, probed in (("mask_token_in_encoder", -0.7, -13.9),
                                    ("decoder_1", -0.1, -4.5), ("decoder_4", 0.0, 1.9),
                                    ("pixels", -0.5, -0.4)):
        assert paper_change("accuracy", sweep, row, "default") == pytest.approx(fine_tuned), row
        assert paper_change("probe.accuracy", sweep, row, "default") == pytest.approx(probed)
