"""What a sweep config declares (train/sweep.py runs it): a `Sweep` of rows, `Stage`s and
`Metric`s, the paper's `Finding`s it tests (train/findings.py judges them), checked when it is
built, and `load_sweep_file` that calls a file's `get_sweep(arg)`."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from train.config import call_file_function

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+=-]*$")  # row and stage names are directory names


class SweepError(ValueError):
    """The sweep config, the command line or the sweep directory is inconsistent."""


SPLITS = ("eval", "train")


@dataclasses.dataclass(frozen=True)
class Metric:
    """A number from a run's final eval (the 'eval' record at train.num_steps in metrics.jsonl),
    or with split='train' from its last train record (e.g. steps_per_second: a measured speed,
    over the last train.log_every steps, evals and checkpoints not counted)."""

    name: str                  # key of the eval record, e.g. 'accuracy'
    better: str = "max"        # 'max' | 'min'
    stage: str = ""            # the stage whose final eval holds it; '': the last stage
    split: str = "eval"        # 'eval' | 'train'

    def __post_init__(self):
        if self.better not in ("max", "min"):
            raise SweepError(f"Metric {self.name!r}: better={self.better!r} is not 'max' or 'min'")
        if self.split not in SPLITS:
            raise SweepError(f"Metric {self.name!r}: split={self.split!r} is not one of "
                             f"{list(SPLITS)}")


@dataclasses.dataclass(frozen=True)
class Stage:
    """One `python -m train` run per row and seed."""

    name: str                  # the run's workdir is DIR/<row>/seed_<k>/<name>
    config: str                # FILE[:ARG]; a relative FILE is found from the cwd, else the repo
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # key -> value, all rows
    apply_rows: bool = True    # apply the row's change to this stage
    previous_workdir_key: str = ""  # config key that receives the previous stage's workdir
    workdir_from: str = ""     # ... of this earlier stage instead ('': the one just before)
    # row -> {key: value} for this stage only, applied last, whether or not apply_rows (a row
    # that changes a later stage too, e.g. a longer fine-tuning for equal total compute)
    row_overrides: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)


EXPECTATIONS = ("higher", "lower", "level")


@dataclasses.dataclass(frozen=True)
class Reached:
    """A finding is testable only where every seed of each of `rows` reached `value` on `metric`
    (`at_least`; else at most): e.g. an encoder's MLM accuracy above the unigram plateau, without
    which its downstream numbers measure a failure to start learning, not a masking strategy."""

    metric: str
    value: float
    rows: tuple[str, ...]
    why: str                  # what falling short means, for the verdict's reason
    at_least: bool = True


@dataclasses.dataclass(frozen=True)
class Levelled:
    """A finding is testable only where `metric` of `row` had levelled off: in every seed its
    final eval differs from the eval at `1 - last` of the run's steps by at most `tolerance`
    (in the metric's units; perplexity in % of the earlier value), read from the eval history
    in the runs' records. Results of models still improving fast do not test the paper."""

    row: str
    metric: str
    tolerance: float
    last: float = 0.25


@dataclasses.dataclass(frozen=True)
class Sensitive:
    """A 'level' finding is testable only where its metric tells `row` from `baseline` by
    clearly more than the finding's tolerance (paired by seed, train/findings.py): e.g. BERT's
    masking strategies are 'within a point' of each other only if pretraining itself is worth
    clearly more than a point there; else the test cannot tell a strategy from none."""

    row: str
    baseline: str
    why: str                  # what a metric this insensitive means, for the verdict's reason


@dataclasses.dataclass(frozen=True)
class Finding:
    """One finding of the paper, stated in a sentence, and the paired comparison that tests it:
    `metric` of `row` against `against_metric` (default: the same) of `against` (default: the
    sweep's reference row), seed by seed. `expect`: what the paper found of the first relative
    to the second ('higher', 'lower' or 'level': no difference larger than `tolerance`, in the
    units of the comparison). `paper`: the paper's own numbers for it, from its table.
    `if_not`: the likely reason, shown when ours does not reproduce it. `requires`: what must
    hold of the runs for the comparison to test the paper at all (`Reached`, `Levelled`,
    `Sensitive`)."""

    claim: str
    metric: str
    row: str
    expect: str
    paper: str
    against: str = ""
    against_metric: str = ""
    tolerance: float = 0.0
    if_not: str = ""
    requires: tuple[Reached | Levelled | Sensitive, ...] = ()

    def __post_init__(self):
        if self.expect not in EXPECTATIONS:
            raise SweepError(f"Finding {self.claim!r}: expect={self.expect!r} is not one of "
                             f"{list(EXPECTATIONS)}")
        if (self.expect == "level") != (self.tolerance > 0):
            raise SweepError(f"Finding {self.claim!r}: a 'level' finding needs tolerance > 0 (the "
                             "largest change that still counts as none), and only it has one")


@dataclasses.dataclass(frozen=True)
class Sweep:
    """An ablation table: its rows, the runs behind each (stages x seeds) and what to report."""

    title: str
    stages: tuple[Stage, ...]
    rows: Mapping[str, Mapping[str, Any] | str]  # ordered; a config `:arg` or {key: value}
    metrics: tuple[Metric, ...]                  # the first one ranks the rows
    seeds: int = 3                               # default of --seeds: seeds 0 .. seeds-1
    paper: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    paper_note: str = ""                         # what the paper's numbers measure
    # A row's paper change is from the reference row's paper numbers, unless the paper's own
    # comparison starts elsewhere (another of its tables' baselines): {row: {metric: value}}.
    paper_reference: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    findings: tuple[Finding, ...] = ()           # the paper's findings this table tests
    # Cells that measure another row's model, {row: {metric: that row}} (a linear probe of the
    # same random encoder): shown as '= `that row`', never compared, plotted or judged.
    repeats: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        names = [stage.name for stage in self.stages]
        if not names:
            raise SweepError("a sweep needs at least one stage")
        if len(set(names)) != len(names):
            raise SweepError(f"stage names repeat: {names}")
        if self.stages[0].previous_workdir_key:
            raise SweepError(f"the first stage {names[0]!r} has no previous stage for "
                             f"previous_workdir_key={self.stages[0].previous_workdir_key!r}")
        for index, stage in enumerate(self.stages):
            if stage.workdir_from and stage.workdir_from not in names[:index]:
                raise SweepError(f"stage {stage.name!r}: workdir_from={stage.workdir_from!r} is "
                                 f"not an earlier stage ({names[:index]})")
            if stage.workdir_from and not stage.previous_workdir_key:
                raise SweepError(f"stage {stage.name!r}: workdir_from needs previous_workdir_key "
                                 "(the config key that receives the workdir)")
        if not self.rows:
            raise SweepError("a sweep needs at least one row")
        for stage in self.stages:
            unknown = [row for row in stage.row_overrides if row not in self.rows]
            if unknown:
                raise SweepError(f"stage {stage.name!r}: row_overrides for {unknown}, not rows "
                                 f"of this sweep ({list(self.rows)})")
        for row, change in self.rows.items():
            if not isinstance(change, (str, Mapping)):
                raise SweepError(f"row {row!r}: {change!r} is neither a config `:arg` string nor "
                                 "a {key: value} mapping")
        for name in [*names, *self.rows]:
            if not _NAME.match(name):
                raise SweepError(f"{name!r} cannot name a directory: use letters, digits, _.+=-")
        if not self.metrics:
            raise SweepError("a sweep needs at least one metric")
        for metric in self.metrics:
            if metric.stage and metric.stage not in names:
                raise SweepError(f"Metric {metric.name!r}: stage {metric.stage!r} is not one of "
                                 f"{names}")
        labels = [self.label(metric) for metric in self.metrics]
        if len(set(labels)) != len(labels):
            raise SweepError(f"metrics repeat: {labels}")
        for what, numbers in (("paper numbers", self.paper),
                              ("paper reference numbers", self.paper_reference)):
            for row, values in numbers.items():
                if row not in self.rows:
                    raise SweepError(f"{what} for {row!r}, which is not a row: "
                                     f"{list(self.rows)}")
                unknown = set(values) - {self.label(m) for m in self.metrics}
                if unknown:
                    raise SweepError(f"{what} for {row!r} name unknown metrics "
                                     f"{sorted(unknown)}")
        for row, cells in self.repeats.items():
            unknown = sorted({row, *cells.values()} - set(self.rows))
            if unknown or set(cells) - set(labels):
                raise SweepError(f"repeats for {row!r}: rows {unknown} / metrics "
                                 f"{sorted(set(cells) - set(labels))} are not the sweep's")
        if self.seeds < 1:
            raise SweepError(f"seeds={self.seeds} must be >= 1")
        for finding in self.findings:
            self._check_finding(finding, labels)

    def _check_finding(self, finding: Finding, labels: list[str]) -> None:
        rows = [finding.row, *([finding.against] if finding.against else [])]
        metrics = [finding.metric, *([finding.against_metric] if finding.against_metric else [])]
        for need in finding.requires:
            if isinstance(need, Sensitive):
                if finding.expect != "level":
                    raise SweepError(f"Finding {finding.claim!r}: Sensitive applies to a 'level' "
                                     "finding (it compares a separation with its tolerance)")
                rows += [need.row, need.baseline]
                continue
            rows += list(need.rows) if isinstance(need, Reached) else [need.row]
            metrics.append(need.metric)
        for row in rows:
            if row not in self.rows:
                raise SweepError(f"Finding {finding.claim!r} names {row!r}, which is not a row: "
                                 f"{list(self.rows)}")
        for metric in metrics:
            if metric not in labels:
                raise SweepError(f"Finding {finding.claim!r} names the metric {metric!r}; the "
                                 f"sweep's metrics are {labels}")
        for row in rows:
            for metric in set(metrics) & set(self.repeats.get(row, {})):
                raise SweepError(f"Finding {finding.claim!r} compares {metric} of row {row}, "
                                 f"which measures row {self.repeats[row][metric]}'s model again "
                                 "(Sweep.repeats)")

    def repeated(self, row: str, label: str) -> str | None:
        """The row whose model `row`'s `label` measures again (Sweep.repeats), or None."""
        return self.repeats.get(row, {}).get(label)

    def label(self, metric: Metric) -> str:
        """Column name: 'accuracy', or 'pretrain.mlm_accuracy' for a stage other than the last;
        a train-split metric's name is 'train.<name>' ('pretrain.train.steps_per_second')."""
        stage = metric.stage or self.stages[-1].name
        name = metric.name if metric.split == "eval" else f"train.{metric.name}"
        return name if stage == self.stages[-1].name else f"{stage}.{name}"


def load_sweep_file(spec: str) -> Sweep:
    """'configs/ablations/vit_posemb.py:smoke' -> get_sweep('smoke')."""
    sweep = call_file_function(spec, "get_sweep", SweepError, "sweep config")
    if not isinstance(sweep, Sweep):
        raise SweepError(f"{spec}: get_sweep returned {type(sweep).__name__}, not a Sweep")
    return sweep
