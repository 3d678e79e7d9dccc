"""The docs' tables of single runs, rendered from their committed records
(notebooks/results/runs/NAME/record.json, train/headline_runs.py names them); a run not recorded
yet renders as the commands that make and save its record, never as a number.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from train import run_record
from train.headline_runs import RUNS

RESULTS = run_record.REPO / "notebooks" / "results"
FINETUNE = ("finetune_spam", "finetune_tweets", "finetune_brown_genre", "finetune_brown_pos",
            "finetune_brown_pos_features")


class Records:
    """The committed records under `results` (notebooks/results: runs/NAME/record.json and the
    sweeps' folders), each single-run record read and checked once."""

    def __init__(self, results: Path = RESULTS):
        self.results = Path(results)
        self.runs_dir = self.results / "runs"
        self._cache: dict[str, dict | None] = {}

    @classmethod
    def committed(cls, results: Path = RESULTS) -> "Records":
        """The records of a folder laid out as notebooks/results is (its runs/ folder there);
        RecordError for another folder, which would render every number as not recorded."""
        results = Path(results)
        if not results.is_dir():
            found = "is not a folder" if results.exists() else "does not exist"
            raise run_record.RecordError(f"--results {results} {found}: give the folder of the "
                                         f"committed records (default {RESULTS})")
        if not (results / "runs").is_dir():
            raise run_record.RecordError(
                f"--results {results} holds no runs/ folder, so it is not a folder of committed "
                f"records (runs/NAME/record.json, the sweeps' folders); give that folder "
                f"(default {RESULTS})")
        return cls(results)

    def get(self, name: str) -> dict | None:
        if name not in RUNS:
            raise KeyError(f"{name!r} is not a headline run (train/headline_runs.py)")
        if name not in self._cache:
            path = self.runs_dir / name / run_record.FILENAME
            self._cache[name] = run_record.load(path) if path.exists() else None
        return self._cache[name]


# ---- formatting ------------------------------------------------------------------------------
def clock(seconds: float) -> str:
    """812.4 -> '13:32'; 3608 -> '1:00:08'."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def percent(value: float, digits: int = 2) -> str:
    return f"{100 * value:.{digits}f}%"


def flop_rate(flops: float) -> str:
    return f"{flops / 1e12:.1f} TFLOP/s" if flops >= 1e12 else f"{flops / 1e9:.0f} GFLOP/s"


def not_recorded(names) -> str:
    """One line per missing record: the commands that make and save it."""
    lines = []
    for name in names:
        run = RUNS[name]
        fetch = f"python -m data.fetch {run.fetch} && " if run.fetch else ""
        lines.append(f"- `{name}`: (not recorded yet: `{fetch}{run.command}`, then "
                     f"`{run.save_command}`)")
    return "\n".join(lines)


def provenance(records: dict[str, dict]) -> str:
    """Which records the table comes from, and their machines, dates and code versions."""
    groups: dict[str, list[str]] = {}
    for name, record in records.items():
        m, code = record["machine"], record["code"]
        kind = ("data-sheet peak" if "data sheet" in str(m["peak_flops_source"])
                else "matmul peak")  # the GPU's bf16 figure, or the best matmul measured
        peak = ("" if m["peak_flops_per_device"] is None else
                f", {kind} {flop_rate(m['peak_flops_per_device'])} per device")
        dirty = " with uncommitted changes" if code["dirty"] is True else ""
        load = ("" if m["load_average"] is None else
                ", load average {:.1f} / {:.1f} / {:.1f} (1 / 5 / 15 min) at the end".format(
                    *m["load_average"]))
        devices = (m["backend"] if m["device_kind"] == m["backend"] else
                   f"{m['backend']} {m['device_kind']}")
        key = (f"{record['date'][:10]}, {m['cpu']} ({m['usable_cpus']} of {m['cpu_count']} "
               f"cores), {devices} x {m['device_count']}{peak}, code "
               f"{str(code['commit'])[:10]}{dirty}, jax {record['versions']['jax']}{load}")
        groups.setdefault(key, []).append(f"`{name}`")
    return "\n".join(f"Recorded in `notebooks/results/runs/`: {', '.join(names)}: {key}."
                     for key, names in groups.items())


def _table(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                      *("| " + " | ".join(row) + " |" for row in rows)])


def _compose(table: str, found: dict, missing: list[str]) -> str:
    parts = [table] if found else []
    if found:
        parts.append(provenance(found))
    if missing:
        parts.append(not_recorded(missing))
    return "\n\n".join(parts)


def _gather(records: Records, names) -> tuple[dict, list[str]]:
    found = {n: records.get(n) for n in names}
    return ({n: r for n, r in found.items() if r is not None},
            [n for n, r in found.items() if r is None])


def _spec(record: dict) -> str:
    """The --config FILE[:ARG] a training record ran."""
    argv = record["command"]
    return argv[argv.index("--config") + 1] if "--config" in argv else ""


def _variant(record: dict) -> str:
    return _spec(record).partition(":")[2]


def _elapsed(record: dict, unix_time: float) -> str:
    """Wall clock from the run's first start to `unix_time`, over its recorded sessions."""
    before = 0.0
    for session in record["sessions"]:
        start = datetime.datetime.fromisoformat(session["started"]).timestamp()
        end = datetime.datetime.fromisoformat(session["ended"]).timestamp()
        if start <= unix_time <= end + 1:
            return clock(before + unix_time - start)
        before += session["wall_s"]
    return "-"


# ---- the tables ------------------------------------------------------------------------------
IMAGE_CLASSIFIERS = ("demo", "convnet_teacher")  # Fashion-MNIST, trained from scratch
_CLASSIFIER_HEAD = ["steps x batch", "accuracy", "loss", "wall clock", "steps/s (last log)",
                    "MFU (last log)"]


def _classifier_cells(record: dict) -> list[str]:
    m, config = record["metrics"], record["config"]
    ev, train = m["eval"], m["train"]
    return [f"{m['eval_step']:,} x {config['data']['batch_size']}", percent(ev["accuracy"]),
            f"{ev['loss']:.4f}", clock(record["total_wall_s"]),
            f"{train['steps_per_second']:.2f}", percent(train["mfu"], 1)]


def _split_head(found: dict, head: list[str]) -> list[str]:
    """`accuracy` and `loss` named after the split the records evaluated."""
    split = next((r["metrics"]["eval_split"] for r in found.values()), "test")
    return [f"{split} {h}" if h in ("accuracy", "loss") else h for h in head]


def demo(records: Records) -> str:
    record = records.get("demo")
    if record is None:
        return not_recorded(["demo"])
    m, config = record["metrics"], record["config"]
    split = m["eval_split"]
    evals = " / ".join(f"{e['step']:,}" for e in m["evals"])
    headline = (f"**{percent(m['eval']['accuracy'])} {split} accuracy in "
                f"{clock(record['total_wall_s'])}** ({m['eval_step']:,} steps of "
                f"{config['data']['batch_size']} images at "
                f"{m['train']['steps_per_second']:.1f} steps/s in the last log; evals at steps "
                f"{evals}; the wall clock is the whole command: start-up, compilation, "
                "training, evaluations).")
    table = _table(["config", *_split_head({"demo": record}, _CLASSIFIER_HEAD)],
                   [[f"`{_spec(record)}`", *_classifier_cells(record)]])
    return headline + "\n\n" + _compose(table, {"demo": record}, [])


def image_classifiers(records: Records) -> str:
    """The Fashion-MNIST classifiers trained from scratch: the demo's ViT and DeiT's convnet
    teacher (configs/vit/convnet_teacher.py), the student's bar in DeiT Table 3."""
    found, missing = _gather(records, IMAGE_CLASSIFIERS)
    rows = [[f"`{name}`", f"`{_spec(record)}`", record["config"]["model"]["name"],
             f"{record['metrics']['parameters']:,}", *_classifier_cells(record)]
            for name, record in found.items()]
    head = ["run", "config", "model", "parameters", *_split_head(found, _CLASSIFIER_HEAD)]
    return _compose(_table(head, rows), found, missing)


def translation(records: Records) -> str:
    found, missing = _gather(records, ("translate", "translate_row_E"))
    rows = []
    for name, record in found.items():
        m, config = record["metrics"], record["config"]
        ev, train = m["eval"], m["train"]
        rows.append([f"`{name}`", f"`{_variant(record) or 'default'}`", config["model"]["posemb"],
                     f"{m['parameters']:,}", f"{m['eval_step']:,}",
                     clock(record["total_wall_s"]), f"{ev['bleu']:.2f}",
                     f"{ev['perplexity']:.2f}", percent(ev["accuracy"], 1),
                     f"{train['steps_per_second']:.2f}", percent(train["mfu"], 1)])
    split = next((r["metrics"]["eval_split"] for r in found.values()), "test")
    table = _table(["record", "variant", "positions", "parameters", "steps", "wall clock",
                    f"{split} BLEU", f"{split} perplexity", "token accuracy",
                    "steps/s (last log)", "MFU (last log)"], rows)
    return _compose(table, found, missing)


def bert_pretraining(records: Records) -> str:
    record = records.get("bert_pretrain")
    if record is None:
        return not_recorded(["bert_pretrain"])
    m = record["metrics"]
    rows = []
    for e in m["evals"]:
        last = e["step"] == m["eval_step"] and e is m["evals"][-1]
        rows.append([f"{e['step']:,}" + (" (end)" if last else ""),
                     clock(record["total_wall_s"]) if last else _elapsed(record, e["time"]),
                     percent(e["mlm_accuracy"], 1), percent(e["nsp_accuracy"], 1),
                     f"{e['mlm_loss']:.3f}"])
    table = _table(["eval at step", "wall clock", f"{m['eval_split']} MLM accuracy",
                    f"{m['eval_split']} NSP accuracy", "MLM loss"], rows)
    return _compose(table, {"bert_pretrain": record}, [])


# The LM and the trigram on the same tokens, one pair per BPE vocabulary size.
LANGUAGE_MODEL = ("lm_english", "lm_kneser_ney", "lm_english_v1024", "lm_kneser_ney_v1024",
                  "lm_english_v512", "lm_kneser_ney_v512")
# The 1,024-token LM's peak learning rate, probed with 1,000-step runs (docs/lm.md).
LM_LEARNING_RATE = ("lm_probe_lr1.5e-3", "lm_probe_lr3e-3")


def language_model(records: Records, names: tuple[str, ...] = LANGUAGE_MODEL) -> str:
    """The CPU LM beside the Kneser-Ney trigram on the same tokens (train/kneser_ney.py), at
    each vocabulary size recorded: perplexity compares within a size, bits per byte across."""
    found, missing = _gather(records, names)
    rows = []
    for record in found.values():
        m, data = record["metrics"], record["config"]["data"]
        ev = m["eval"]
        if record["kind"] == "baselines":
            rows.append([f"interpolated Kneser-Ney {ev['order']}-gram ({ev['discounts']} "
                         "discounts)", f"{data['vocab_size']:,}", "-",
                         f"{ev['train_tokens']:,} training tokens counted", "-",
                         clock(record["wall_s"]), f"{ev['perplexity']:.2f}",
                         f"{ev['bits_per_byte']:.4f}", "-"])
        else:
            steps = f"{m['eval_step']:,} x {data['batch_size']} x {data['max_length']}"
            rows.append([f"decoder-only Transformer (`{_spec(record)}`)",
                         f"{data['vocab_size']:,}", f"{m['parameters']:,}", steps,
                         f"{record['config']['optimizer']['learning_rate']:g}",
                         clock(record["total_wall_s"]), f"{ev['perplexity']:.2f}",
                         f"{ev['bits_per_byte']:.4f}", percent(m["train"]["mfu"], 1)])
    split = next((r["metrics"]["eval_split"] for r in found.values()), "validation")
    table = _table(["model", "BPE vocabulary", "parameters", "steps x rows x tokens",
                    "peak learning rate", "wall clock",
                    f"{split} perplexity (per BPE token)", "bits per byte", "MFU (last log)"],
                   rows)
    return _compose(table, found, missing)


def _baseline_cells(baselines: dict | None, task: str) -> list[str]:
    if baselines is None:
        return ["(not recorded yet)"] * 2
    results = baselines["metrics"]["eval"].get(task)
    if results is None:
        return ["-", "-"]
    if "majority_tag" in results:
        return ["-", f"{percent(results['majority_tag']['token_accuracy'])} (most frequent tag "
                     "per word)"]
    return [percent(results["majority"]["accuracy"], 1),
            percent(results["bow_logreg"]["accuracy"], 1)]


def finetuning(records: Records) -> str:
    found, missing = _gather(records, FINETUNE)
    baselines = records.get("baselines")
    rows = []
    for name, record in found.items():
        m, config = record["metrics"], record["config"]
        task = config["data"]["name"]
        metric = "token_accuracy" if "token_accuracy" in m["eval"] else "accuracy"
        epochs = m["train"].get("epochs")
        size = f"{m['eval_step']:,} x {config['data']['batch_size']}" + (
            f" ({epochs:.2f})" if epochs is not None else "")
        rows.append([task, f"`{_variant(record)}`", size, clock(record["total_wall_s"]),
                     percent(m["eval"][metric]) + (" token" if metric == "token_accuracy" else ""),
                     *_baseline_cells(baselines, task)])
    split = next((r["metrics"]["eval_split"] for r in found.values()), "test")
    head = ["task", "variant", "steps x batch (epochs)", "wall clock", f"MiniLM ({split})",
            "majority class", "bag of words"]
    if baselines is not None:
        found = {**found, "baselines": baselines}
    elif found:
        missing = [*missing, "baselines"]
    return _compose(_table(head, rows), found, missing)


def baseline_table(records: Records) -> str:
    record = records.get("baselines")
    if record is None:
        return not_recorded(["baselines"])
    rows = []
    for task, results in record["metrics"]["eval"].items():
        if "majority_tag" in results:
            tag = results["majority_tag"]
            rows.append([task, "-", f"most frequent tag per word: {percent(tag['token_accuracy'])} "
                                    f"token accuracy ({percent(tag['unseen_accuracy'], 1)} on "
                                    f"the {percent(tag['unseen_fraction'], 1)} unseen words)"])
        else:
            bow = results["bow_logreg"]
            rows.append([task, percent(results["majority"]["accuracy"], 1),
                         f"{percent(bow['accuracy'], 1)} (L2 {bow['l2']:g}, "
                         f"{bow['features']:,} words)"])
    split = record["metrics"]["eval_split"]
    table = _table(["task", f"majority class ({split})",
                    f"bag-of-words logistic regression ({split})"], rows)
    return _compose(table, {"baselines": record}, [])


def benchmark(name: str):
    def render(records: Records) -> str:
        record = records.get(name)
        if record is None:
            return not_recorded([name])
        return _compose(record["metrics"]["table"], {name: record}, [])
    return render


def headline_runs(records: Records) -> str:
    rows = []
    for run in RUNS.values():
        record = records.get(run.name)
        state = ("not yet" if record is None else
                 f"{record['date'][:10]}, code {str(record['code']['commit'])[:10]}")
        fetch = f"`python -m data.fetch {run.fetch}`, then " if run.fetch else ""
        rows.append([f"`{run.name}`", run.meaning, f"{fetch}`{run.command}`",
                     f"`{run.save_command}`", state])
    return _table(["name", "what it measures", "command", "save", "recorded"], rows)


def headline(records: Records) -> str:
    """The README's one table: each headline number, the wall clock of its run and the machine's
    load when it ended (other work on the cores slows a run), its record and the page with the
    whole table (links relative to the repository's root)."""
    rows = []

    def add(what: str, name: str, value, page: str) -> None:
        record = records.get(name)
        link = f"[{name}](notebooks/results/runs/{name}/record.json)"
        if record is None:
            rows.append([what, f"not recorded yet: `{RUNS[name].command}`", "-", "-", "-", page])
            return
        machine = record["machine"]
        wall = "-" if record["kind"] == "benchmark" else clock(record["total_wall_s"])
        load = ("-" if machine["load_average"] is None else
                f"{machine['load_average'][2]:.1f} on {machine['usable_cpus']} cores")
        rows.append([what, value(record), wall, load, link, page])

    def ev(record: dict) -> dict:
        return record["metrics"]["eval"]

    def split(record: dict) -> str:
        return record["metrics"]["eval_split"]

    results, benchmarks = "[results](docs/results.md)", "[benchmarks](docs/benchmarks.md)"
    add("ViT on Fashion-MNIST (`make demo`)", "demo",
        lambda r: f"{percent(ev(r)['accuracy'])} {split(r)} accuracy", results)
    add("Transformer, Bible en -> es, sinusoids", "translate",
        lambda r: f"{ev(r)['bleu']:.2f} {split(r)} BLEU", results)
    add("the same with learned positions (Table 3, E)", "translate_row_E",
        lambda r: f"{ev(r)['bleu']:.2f} {split(r)} BLEU", results)
    add("BERT pretraining, Brown + Austen + SOTU", "bert_pretrain",
        lambda r: f"MLM {percent(ev(r)['mlm_accuracy'], 1)}, NSP "
                  f"{percent(ev(r)['nsp_accuracy'], 1)} ({split(r)})", results)
    for name, task in (("finetune_spam", "spam"), ("finetune_tweets", "tweets (3 classes)"),
                       ("finetune_brown_genre", "Brown genre (15 classes)"),
                       ("finetune_brown_pos", "Brown POS tagging"),
                       ("finetune_brown_pos_features", "Brown POS, frozen encoder (Table 7)")):
        add(f"MiniLM fine-tuned: {task}", name,
            lambda r: (f"{percent(ev(r)['token_accuracy'])} token accuracy"
                       if "token_accuracy" in ev(r) else f"{percent(ev(r)['accuracy'])} accuracy")
            + f" ({split(r)})", results)

    def bench(r: dict) -> str:
        report = r["metrics"]
        (ours,) = [row for row in report["rows"] if row["label"] == "ours"]
        ratio = report["ratios"].get("standard step (peer time / ours)")
        versus = "" if ratio is None else f", {ratio:.2f}x the Hugging Face step"
        return f"MFU {percent(ours['mfu'], 1)}{versus}"

    add("BERT-base train step, seq 128, 2-core CPU", "bench_bert_base", bench, benchmarks)
    add("ViT-B/16 train step, 2-core CPU", "bench_vit_b16", bench, benchmarks)
    add("BERT-base train step, seq 128, bf16, one H100", "bench_gpu_bert_base_128", bench,
        benchmarks)
    add("BERT-large train step, seq 512, bf16, one GPU", "bench_gpu_bert_large_512", bench,
        benchmarks)
    add("ViT-B/16 train step, bf16, one H100", "bench_gpu_vit_b16", bench, benchmarks)
    return _table(["result", "value", "wall clock", "machine load (15 min)", "record", "table"],
                  rows)
