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


# A sweep of two stages, the second fine-tuning from the first's workdir (tests/test_sweep.py,
# tests/test_sweep_parallel.py); `{stage2}` is the path of a file holding STAGE2_CONFIG.
STAGE2_CONFIG = '''
from configs.vit import fashion_mnist


def get_config(arg=None):
    config = fashion_mnist.get_config("smoke")
    config.init_from = ""  # the pretraining workdir (this test only records it)
    config.train.num_steps = 10
    return config
'''


TWO_STAGE_SWEEP = '''
from train.sweep_spec import Metric, Stage, Sweep


def get_sweep(arg=None):
    quiet = {{"train.progress_bar": False, "train.eval_every": 0}}
    return Sweep(
        title="two stages",
        stages=(Stage("pretrain", "configs/vit/fashion_mnist.py:smoke", quiet),
                Stage("finetune", {stage2!r}, quiet, apply_rows=False,
                      previous_workdir_key="init_from")),
        rows={{"bad": {{"model.num_heads": 3}}, "ok": {{}}}},  # fails as its run starts
        metrics=(Metric("accuracy", "max"), Metric("accuracy", "max", stage="pretrain")),
        seeds=1)
'''
