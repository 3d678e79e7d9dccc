"""What the sweep runner's tests and the ablation configs' tests share: a planned run's config
as its trainer will see it, and `python -m train.sweep` run as a subprocess."""

from __future__ import annotations

from conftest import run_python

from train.config import apply_override, load_config_file

SMOKE = "configs/ablations/vit_posemb.py:smoke"


def run_config(run):
    """The config a planned run's trainer will see: its file, then its --config.key=value items."""
    config = load_config_file(run.argv[1])
    for item in run.argv[4:]:
        key, _, raw = item[len("--config."):].partition("=")
        apply_override(config, key, raw)
    return config


def sweep_cli(workdir, *extra, config=SMOKE):
    return ["-m", "train.sweep", "--config", config, "--workdir", str(workdir), *extra]


def run_sweep(workdir, data_root, *extra, config=SMOKE, check=True):
    return run_python(sweep_cli(workdir, *extra, config=config),
                      env={"PAPERS_JAX_DATA": str(data_root)}, check=check)
