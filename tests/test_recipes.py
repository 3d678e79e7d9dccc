"""The paper-scale recipes end to end without their data: BERT on Wikipedia, ViT on ImageNet
(from scratch, then fine-tuned), the Transformer on WMT 2014. Each runs `python -m train` on
TFDS's mock data for the real dataset (tests/tfds_mock.py: the builder's features and splits,
random examples) on 4 forced CPU devices with data=2 x fsdp=2 (the real mesh rules: batch split
over both axes, parameters sharded on fsdp), with the recipe's settings but for a tiny model and
a few steps (each config's `smoke` variant)."""

from __future__ import annotations

import json

import pytest
from conftest import json_report, run_python

MESH = ["--config.mesh.data=2", "--config.mesh.fsdp=2"]


def _train(tmp_path, num_examples: int, config: str, workdir, *more) -> tuple[int, str]:
    """(exit status of python -m train, its stderr) for `config` on mocked TFDS data."""
    result = run_python(["tests/scripts/recipe_run.py", str(num_examples), "--config", config,
                         "--workdir", str(workdir), *MESH, *more],
                        env={"PAPERS_JAX_DATA": str(tmp_path / "data")}, devices=4)
    return json_report(result.stdout)["code"], result.stderr


def _log(workdir, split: str) -> list[dict]:
    return [entry for line in (workdir / "metrics.jsonl").read_text().splitlines()
            if (entry := json.loads(line))["split"] == split]


def _config(workdir) -> dict:
    return json.loads((workdir / "config.json").read_text())


def test_bert_pretrains_on_wikipedia_through_the_stream_and_both_phases(tmp_path):
    """size=base,data=wikipedia: articles streamed, split into passages and sentences in the
    pipeline, a WordPiece vocabulary trained on a sample of them, App. A.2's optimizer and
    schedule, and the last 10% of the steps in phase 2 (longer rows, its own batch)."""
    workdir = tmp_path / "bert"
    code, stderr = _train(tmp_path, 40, "configs/bert/pretrain.py:size=base,data=wikipedia,smoke",
                          workdir)
    assert code == 0, stderr[-3000:]
    config = _config(workdir)
    assert config["data"]["source"] == "tfds"
    assert config["data"]["names"] == ["wikipedia/20230601.en"]
    optimizer = config["optimizer"]
    assert (optimizer["name"], optimizer["schedule"], optimizer["learning_rate"],
            optimizer["b2"], optimizer["weight_decay"]) == ("adamw", "linear", 1e-4, 0.999, 0.01)
    assert config["data"]["phase2_fraction"] == 0.1 and config["model"]["posemb"] == "learned"
    # Phase 2 ran: the last step drew from the second pipeline (PhasedIterator's state).
    state = json.loads((workdir / "checkpoints" / "12" / "data" /
                        "process_0-of-1.json").read_text())["train_iterator"]
    assert state["batches"] == 12 and state["second"] is not None
    assert [e["step"] for e in _log(workdir, "train")] == [4, 8, 12]
    final = _log(workdir, "eval")[-1]
    assert final["step"] == 12 and 0 <= final["mlm_accuracy"] <= 1 and "nsp_accuracy" in final
    cached = list((tmp_path / "data" / "vocab").glob("wikipedia*sample20*.json"))
    assert cached, "the vocabulary was trained on the sample of 20 articles"


def test_vit_pretrains_on_imagenet_then_finetunes_from_it(tmp_path):
    """stage=pretrain (Adam, weight decay 0.3, cosine, clipping, Inception crops of images of
    any size, the pre-logits head), then stage=finetune from its workdir (SGD with momentum, a
    new zero head, the backbone from the pretraining run's last checkpoint)."""
    pretrain = tmp_path / "vit"
    code, stderr = _train(tmp_path, 48, "configs/vit/imagenet.py:smoke", pretrain)
    assert code == 0, stderr[-3000:]
    config = _config(pretrain)
    assert (config["optimizer"]["name"], config["optimizer"]["weight_decay"],
            config["optimizer"]["schedule"], config["optimizer"]["clip_norm"]) == (
                "adamw", 0.3, "cosine", 1.0)
    assert (config["data"]["augment"], config["data"]["eval_resize"]) == ("inception_crop",
                                                                          "center_crop")
    assert config["model"]["head_hidden_size"] == 32 and config["model"]["dropout_rate"] == 0.1
    assert _log(pretrain, "eval")[-1]["step"] == 6

    finetune = tmp_path / "vit_ft"
    code, stderr = _train(tmp_path, 48, f"configs/vit/imagenet.py:stage=finetune,init={pretrain},"
                          "smoke", finetune)
    assert code == 0, stderr[-3000:]
    assert f"weights: the backbone of the latest checkpoint in {pretrain}" in stderr
    config = _config(finetune)
    assert (config["optimizer"]["name"], config["optimizer"]["momentum"],
            config["optimizer"]["weight_decay"]) == ("sgd", 0.9, 0.0)
    assert config["model"]["head_hidden_size"] == 0 and config["data"]["eval_resize"] == "resize"
    assert 0 <= _log(finetune, "eval")[-1]["accuracy"] <= 1


def test_transformer_trains_on_wmt14_and_scores_the_averaged_checkpoints(tmp_path):
    """size=base,data=wmt14: the paper's optimizer and schedule, label smoothing, packed rows,
    beam search and BLEU on the test split (newstest2014), the final eval of the average of the
    last checkpoints (3 in the smoke run, 5 at base)."""
    workdir = tmp_path / "wmt"
    code, stderr = _train(tmp_path, 48, "configs/transformer/translate.py:size=base,data=wmt14,"
                          "smoke", workdir)
    assert code == 0, stderr[-3000:]
    config = _config(workdir)
    assert config["data"]["name"] == "wmt14_translate/de-en"
    assert (config["data"]["source_key"], config["data"]["target_key"]) == ("en", "de")
    assert config["train"]["average_checkpoints"] == 3
    evals = _log(workdir, "eval")
    assert [e["step"] for e in evals] == [6, 12]
    final = evals[-1]
    assert final["averaged_checkpoints"] == 3 and "averaged_checkpoints" not in evals[0]
    assert final["decoded"] == 48 and 0 <= final["bleu"] <= 100
    assert "the average of the last 3 checkpoints, steps 4, 8, 12" in stderr


def test_the_wmt14_test_split_is_newstest2014():
    """Table 2's BLEU is on newstest2014: the split data=wmt14 evaluates ('test') is TFDS's
    newstest2014, its validation split newsdev2014 + newstest2013."""
    import tensorflow_datasets as tfds
    from tensorflow_datasets.translate import wmt14

    from configs.transformer.translate import DATASETS, get_config

    subsets = wmt14.Wmt14Translate._subsets.fget(None)
    assert get_config("data=wmt14").data.eval_split == "test" == DATASETS["wmt14"][4]
    assert subsets[tfds.Split.TEST] == ["newstest2014"]
    assert subsets[tfds.Split.VALIDATION] == ["newsdev2014", "newstest2013"]


@pytest.mark.parametrize("posemb, refused", [("learned_1d", True), ("sincos_2d", False)])
def test_a_finetuning_resolution_change_waits_for_position_embedding_resampling(
        tmp_path, posemb, refused):
    """A ViT pretrained at 224 px fine-tuned at 384 would need its learned position embeddings
    resampled to the larger grid (ViT Sec. 3.2), which is not here yet: refused with the
    resolution to use; a fixed sine-cosine table has nothing to resample."""
    from train.config import ConfigError
    from train.tasks.classify import _model_config
    from train.vit_init import check_resolution

    from configs.vit.imagenet import get_config

    pretrain = tmp_path / "pretrain"
    pretrain.mkdir()
    saved = get_config("smoke")
    saved.model.posemb = posemb
    (pretrain / "config.json").write_text(saved.to_json())
    finetune = get_config(f"stage=finetune,init={pretrain},resolution=48,smoke")
    finetune.model.posemb = posemb
    if not refused:
        check_resolution(str(pretrain), _model_config(finetune))
        return
    with pytest.raises(ConfigError) as error:
        check_resolution(str(pretrain), _model_config(finetune))
    message = str(error.value)
    assert "trained on 32x32 images in 8-pixel patches (a 4x4 grid)" in message
    assert "48x48 in 8-pixel patches (a 6x6 grid)" in message
    assert "not available yet" in message
    assert "--config.model.image_size=32,32 --config.data.image_shape=32,32,3" in message
