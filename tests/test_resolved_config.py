"""A workdir's config.json is the model that ran (train/run_config.py): a pretrained model's sizes
and vocabulary, a vocabulary's size; --print_config shows the same without building anything; a
resume compares the requested config (requested_config.json); the console names the weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from minilm_standin import install_minilm_standin
from train import run_config
from train.__main__ import main
from train.config import apply_override, load_config_file, to_json

SPAM_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "spam"
DIMS = ("hidden_size", "num_layers", "num_heads", "mlp_dim", "max_position_embeddings",
        "vocab_size")


def _run(argv, capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_print_config_runs_without_a_workdir_and_training_needs_one(capsys):
    code, out, _ = _run(["--config", "configs/vit/fashion_mnist.py:smoke", "--print_config"],
                        capsys)
    assert code == 0 and json.loads(out)["model"]["hidden_size"] == 32
    with pytest.raises(SystemExit) as exit_info:  # argparse: usage and exit 2
        main(["--config", "configs/vit/fashion_mnist.py:smoke"])
    assert exit_info.value.code == 2
    assert "--workdir is required" in capsys.readouterr().err


@pytest.fixture
def minilm_spam_root(tmp_path, monkeypatch):
    """A data root with the MiniLM stand-in and the prepared spam fixture."""
    from data import builders

    root = tmp_path / "root"
    folder, cfg = install_minilm_standin(root)
    shutil.copytree(SPAM_FIXTURE / "package", root / "raw" / "spam" / "package")
    monkeypatch.setenv("PAPERS_JAX_DATA", str(root))
    builders.prepare("spam")
    return folder, cfg


def test_finetuning_from_minilm_records_its_model_and_resumes(minilm_spam_root, tmp_path,
                                                               capsys):
    folder, cfg = minilm_spam_root
    command = ["--config", "configs/bert/finetune.py:task=spam,init=minilm,smoke",
               "--config.train.num_steps=3"]
    workdir = tmp_path / "run"
    line = (f"encoder: all-MiniLM-L6-v2 from {folder} ({cfg.num_layers} layers, hidden "
            f"{cfg.hidden_size}, {cfg.vocab_size:,} tokens)")

    code, printed, err = _run([*command, "--print_config"], capsys)
    assert code == 0 and line in err, err
    printed = json.loads(printed)
    assert {k: printed["model"][k] for k in DIMS} == {k: getattr(cfg, k) for k in DIMS}

    code, _, err = _run([*command, "--workdir", str(workdir)], capsys)
    assert code == 0 and line in err, err
    saved = _json(workdir / "config.json")
    assert saved == printed  # the model that ran is the one --print_config showed
    assert saved["model"]["dropout_rate"] == 0.1  # fine-tuning's own setting, not MiniLM's
    requested = _json(workdir / "requested_config.json")
    assert requested["model"]["hidden_size"] == 32 and "vocab_size" not in requested["model"]

    code, again, _ = _run([*command, "--workdir", str(workdir), "--print_config"], capsys)
    assert code == 0 and json.loads(again) == saved
    code, _, err = _run([*command, "--workdir", str(workdir)], capsys)  # the same command
    assert code == 0 and "resumed from" in err and line not in err, err
    code, _, err = _run([*command, "--workdir", str(workdir), "--config.model.dropout_rate=0.2"],
                        capsys)
    assert code == 2 and "model.dropout_rate: 0.1 in the workdir, 0.2 now" in err
    assert "hidden_size" not in err  # like with like: MiniLM's sizes are no difference


def test_a_workdir_written_before_keeps_resuming(tmp_path):
    """A workdir from before requested_config.json has only config.json, then the requested
    config: a resume compares with it."""
    from train.__main__ import check_workdir

    config = load_config_file("configs/bert/finetune.py:init=minilm,smoke")
    (tmp_path / "config.json").write_text(to_json(config))
    assert check_workdir(tmp_path, to_json(config), allow_change=False) == []
    assert run_config.saved_request(tmp_path) == json.loads(to_json(config))


@pytest.fixture
def brown_root(brown_data_root, tmp_path, monkeypatch):
    """The Brown fixture in a data root of its own: its vocabulary cache starts empty."""
    root = tmp_path / "root"
    root.mkdir()
    for link in (Path("raw"), Path("tfds")):
        (root / link).symlink_to(brown_data_root / link)
    monkeypatch.setenv("PAPERS_JAX_DATA", str(root))
    return root


def test_pretraining_records_its_vocabulary_and_finetuning_from_it_its_sizes(brown_root,
                                                                           tmp_path, capsys):
    from train import vocabulary

    pretrain = ["--config", "configs/bert/pretrain.py:smoke", "--config.data.names=('brown',)",
                "--config.train.num_steps=2", "--config.optimizer.warmup_steps=1",
                "--config.train.eval_every=0",
                "--config.model.hidden_size=16", "--config.model.num_layers=1",
                "--config.model.mlp_dim=48"]
    pre = tmp_path / "pretrain"
    code, printed, _ = _run([*pretrain, "--print_config"], capsys)
    assert code == 0
    pending = json.loads(printed)["model"]["vocab_size"]  # no vocabulary trained to tell it
    assert pending.startswith("<the size of the WordPiece vocabulary trained on brown train")
    assert "config.data.vocab_size=400 asked for" in pending
    assert pending.endswith("; not trained yet>")
    assert not (brown_root / "vocab").exists()  # and --print_config trained none

    assert _run([*pretrain, "--workdir", str(pre)], capsys)[0] == 0
    size = vocabulary.load(pre).vocab_size
    saved = _json(pre / "config.json")
    assert saved["model"]["vocab_size"] == size and saved["data"]["vocab_size"] == 400
    code, printed, _ = _run([*pretrain, "--workdir", str(pre), "--print_config"], capsys)
    assert code == 0 and json.loads(printed) == saved

    finetune = ["--config", "configs/bert/finetune.py:task=brown_genre,smoke",
                f"--config.init={pre}", "--config.data.eval_split=test",
                "--config.train.num_steps=3"]
    ft = tmp_path / "finetune"
    code, printed, err = _run([*finetune, "--print_config"], capsys)
    assert code == 0
    line = (f"encoder: the pretraining run in {pre}, its latest checkpoint (1 layer, hidden 16, "
            f"{size:,} tokens)")
    assert line in err
    code, _, err = _run([*finetune, "--workdir", str(ft)], capsys)
    assert code == 0 and line in err, err
    model = _json(ft / "config.json")["model"]
    assert {k: model[k] for k in ("hidden_size", "num_layers", "mlp_dim", "vocab_size",
                                  "posemb")} == {"hidden_size": 16, "num_layers": 1,
                                                 "mlp_dim": 48, "vocab_size": size,
                                                 "posemb": "alibi"}
    assert (model["dropout_rate"], model["nsp"]) == (0.1, False)  # fine-tuning's settings
    assert _json(ft / "config.json") == json.loads(printed)


def _smoke(spec: str, **overrides):
    config = load_config_file(spec)
    for key, value in overrides.items():
        apply_override(config, key, str(value))
    return config


@pytest.mark.parametrize("case", ["vit", "translate", "bert_pretrain", "finetune_scratch"])
def test_every_tasks_plan_is_what_it_builds(case, request):
    """The plan (--print_config) and the built task resolve the same config: the model with its
    vocab_size from the vocabulary (a SentencePiece one is data.vocab_size pieces, known before
    training). Before a WordPiece vocabulary is trained a plan leaves only its size pending."""
    from train.tasks import get_task, plan_task

    if case == "vit":
        request.getfixturevalue("fashion_mnist_env")
        config = _smoke("configs/vit/fashion_mnist.py:smoke")
    elif case == "translate":
        request.getfixturevalue("bible_env")
        config = _smoke("configs/transformer/translate.py:smoke", **{"data.vocab_size": 280})
    else:
        request.getfixturevalue("brown_root")
        config = (_smoke("configs/bert/pretrain.py:smoke", **{"data.names": "('brown',)"})
                  if case == "bert_pretrain" else
                  _smoke("configs/bert/finetune.py:task=brown_genre,init=scratch,smoke"))
    before = run_config.resolved(config, plan_task(config))
    task = get_task(config)
    built = run_config.resolved(config, task.resolution())
    after = run_config.resolved(config, plan_task(config))
    assert after == built
    if case in ("bert_pretrain", "finetune_scratch"):  # trained when the task was built
        assert before["model"]["vocab_size"].startswith("<the size of the WordPiece vocabulary")
        before["model"]["vocab_size"] = built["model"]["vocab_size"]
    assert before == built
    if task.tokenizer is not None:
        assert built["model"]["vocab_size"] == task.tokenizer.vocab_size
    if case == "translate":
        assert built["model"]["vocab_size"] == 280
