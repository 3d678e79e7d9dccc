"""Whether the datasets a run reads are in the data root, checked before the run does any work.

    require(["brown", "austen", "sotu"])   # DataError naming every missing one, and the one
                                           # `python -m data.fetch ...` command for them all

A run reads its data late: a vocabulary is trained on the first corpus before the second is
opened, and the model is compiled before the first batch. So the trainer asks the task for every
name it reads and checks them all here first (train/tasks/__init__.py), and a run that lacks data
stops before writing anything (no vocabulary trained, no lock file left).

A dataset is there when its raw files are (what its reader checks: the committed test fixtures,
which have no fetch marker, count too) or its TFDS dataset is already prepared (it is then read
without them); a pretrained checkpoint when its files are (data/fetching/pretrained.py). The full
sha256 check of a fetch is `data.fetching.raw.verify`, which `python -m data.fetch` runs.
"""

from __future__ import annotations

from typing import Iterable

from data import builders, paths
from data.errors import DataError
from data.fetching import catalog, pretrained, raw


def _problem(name: str) -> str | None:
    """None when dataset `name` (a `python -m data.fetch` name) can be read, else why not."""
    # A composite (english_lm) has a builder and no source of its own: its builder checks the
    # raw files of every part, which it reads (their own prepared datasets would not do).
    source = None if name in catalog.COMPOSITES else catalog.get_source(name)  # names the known
    if name in pretrained.CHECKPOINTS:
        try:
            pretrained.checkpoint_dir(name)
        except DataError as error:
            return str(error)
        return None
    if name not in builders.LOCAL_BUILDERS:
        return raw.verify(source)
    try:
        builders.builder_class(name).check_raw_files()
    except DataError as error:
        return None if builders.is_prepared(name) else str(error)
    fetched = source is not None and (paths.raw_dir(name) / raw.MARKER).is_file()
    if fetched and not builders.is_prepared(name):  # about to be built: every file, not a few
        return raw.verify(source)  # (the committed test fixtures have no marker)
    return None


def missing(names: Iterable[str]) -> dict[str, str]:
    """{name: why} for each of `names` that is not in the data root, in the order given."""
    problems = {name: _problem(name) for name in dict.fromkeys(names)}
    return {name: why for name, why in problems.items() if why is not None}


def require(names: Iterable[str]) -> None:
    """DataError naming each of `names` that is not in the data root, with the one command that
    fetches them all (and why, for one whose folder is there but incomplete)."""
    names = list(names)
    for name in names:
        catalog.check_known(name, ". A dataset of the TFDS catalog is read with "
                            "config.data.source='tfds' (TFDS downloads it, or builds it from a "
                            "manual download: docs/data.md)")
    absent = missing(names)
    if not absent:
        return
    damaged = "".join(f"\n  {name}: {why}" for name, why in absent.items()
                      if paths.raw_dir(name).exists())
    them = "it" if len(absent) == 1 else "them"
    raise DataError(f"not fetched into the data root {paths.data_root()} ({paths.ENV_VAR}): "
                    f"{', '.join(absent)}; fetch {them} with\n"
                    f"    python -m data.fetch {' '.join(absent)}{damaged}")
