"""The paper-scale recipes end to end without their data: BERT on Wikipedia, ViT on ImageNet
(from scratch, then fine-tuned), the Transformer on WMT 2014. Each runs `python -m train` on
TFDS's mock data for the real dataset (tests/tfds_mock.py: the builder's features and splits,
random examples) on 4 forced CPU devices with data=2 x fsdp=2 (the real mesh rules: batch split
over both axes, parameters sharded on fsdp), with the recipe's settings but for a tiny model and
a few steps (each config's `smoke` variant). tests/scripts/recipe_probe.py reports what the
run's train state and batches were: the parameters' shardings and the batch shapes per device
(checked here), and which mock examples each split string read (tests/tfds_mock.py honours
TFDS's slices, so a held-out slice is disjoint from the training one)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import json_report, run_python

MESH = ["--config.mesh.data=2", "--config.mesh.fsdp=2"]


def _train(tmp_path, num_examples: int, config: str, workdir, *more) -> tuple[int, str, dict]:
    """(exit status of python -m train, its stderr, recipe_probe's report) for `config` on
    mocked TFDS data."""
    result = run_python(["tests/scripts/recipe_probe.py", str(num_examples), "--config", config,
                         "--workdir", str(workdir), *MESH, *more],
                        env={"PAPERS_JAX_DATA": str(tmp_path / "data")}, devices=4)
    code = json.loads(next(line for line in result.stdout.splitlines()
                           if line.startswith('{"code"')))["code"]
    return code, result.stderr, json_report(result.stdout)["probe"]


def _assert_fsdp_sharded(params: dict, without_embed: tuple[str, ...] = ()) -> None:
    """Every weight matrix (kernels, embedding tables) of the trained state but those of
    `without_embed` (no 'embed' dimension) is split over the mesh's fsdp axis (size 2) along
    its 'embed' dimension, and every parameter whose sharding names fsdp holds half of that
    dimension on a device; nothing is split over `data`."""
    assert params, "the trained state's parameters were not reported"
    assert set(without_embed) <= set(params), sorted(params)
    matrices = [path for path in params if path.endswith(("kernel", "embedding"))
                and path not in without_embed]
    assert len(matrices) >= 5, sorted(params)
    for path, param in params.items():
        assert "data" not in str(param["spec"]), (path, param)
        if path in matrices:
            assert "fsdp" in param["spec"], (path, param)
        if "fsdp" in param["spec"]:
            axis = param["spec"].index("fsdp")
            half = [size // 2 if i == axis else size for i, size in enumerate(param["shape"])]
            assert param["shape"][axis] % 2 == 0 and param["device_shape"] == half, (path, param)


def _batches(probe: dict, field: str) -> list[tuple[list, list]]:
    """(global shape, per-device shape) of `field` in each train step's batch, checking that
    the batch is split over both batch axes (data x fsdp: 4 devices)."""
    steps = [step[field] for step in probe["steps"]]
    assert all(array["spec"][0] == ["data", "fsdp"] for array in steps), steps
    return [(array["shape"], array["device_shape"]) for array in steps]


def _reads(probe: dict) -> dict[str, set[tuple[str, int, int]]]:
    """Split string -> the (split, index, seed) of each mock example read through it."""
    return {spec: {tuple(row) for row in rows} for spec, rows in probe["reads"].items()}


def _examples(reads: dict, spec: str) -> set[int]:
    """The mock examples (their generator seeds: a seed is an example) read through `spec`."""
    return {seed for _, _, seed in reads[spec]}


def _log(workdir, split: str) -> list[dict]:
    return [entry for line in (workdir / "metrics.jsonl").read_text().splitlines()
            if (entry := json.loads(line))["split"] == split]


def _config(workdir) -> dict:
    return json.loads((workdir / "config.json").read_text())


def test_bert_pretrains_on_wikipedia_through_the_stream_and_both_phases(tmp_path):
    """size=base,data=wikipedia: articles streamed, split into passages and sentences in the
    pipeline, a WordPiece vocabulary trained on a sample of them, App. A.2's optimizer and
    schedule, and the last 10% of the steps in phase 2 (longer rows, its own batch). The recipe
    holds out Wikipedia's last 2,000 articles (train[-2000:], pinned in
    test_recipe_hyperparameters.py), more than the 40 mock articles: its smoke variant the last
    8, read through TFDS's slicing, and never trained on."""
    workdir = tmp_path / "bert"
    code, stderr, probe = _train(
        tmp_path, 40, "configs/bert/pretrain.py:size=base,data=wikipedia,smoke", workdir)
    assert code == 0, stderr[-3000:]
    config = _config(workdir)
    assert config["data"]["source"] == "tfds"
    assert config["data"]["names"] == ["wikipedia/20230601.en"]
    optimizer = config["optimizer"]
    assert (optimizer["name"], optimizer["schedule"], optimizer["learning_rate"],
            optimizer["b2"], optimizer["weight_decay"]) == ("adamw", "linear", 1e-4, 0.999, 0.01)
    assert config["data"]["phase2_fraction"] == 0.1 and config["model"]["posemb"] == "learned"
    # Phase 2 ran: the last step drew from the second pipeline (PhasedIterator's state) ...
    state = json.loads((workdir / "checkpoints" / "12" / "data" /
                        "process_0-of-1.json").read_text())["train_iterator"]
    assert state["batches"] == 12 and state["second"] is not None
    # ... and the jitted step got its rows: 11 steps of 8 x 32 tokens (2 rows a device), then
    # 10% of 12 steps, one, of phase 2's 4 x 64 (one row a device), 10 predictions a row.
    phase1, phase2 = ([8, 32], [2, 32]), ([4, 64], [1, 64])
    assert _batches(probe, "input_ids") == [phase1] * 11 + [phase2]
    assert _batches(probe, "masked_positions")[-1] == ([4, 10], [1, 10])
    train = _log(workdir, "train")
    assert [e["step"] for e in train] == [4, 8, 12]
    assert all(np.isfinite([e["loss"], e["mlm_loss"], e["nsp_loss"]]).all() for e in train)
    final = _log(workdir, "eval")[-1]
    assert final["step"] == 12 and 0 <= final["mlm_accuracy"] <= 1 and "nsp_accuracy" in final
    assert np.isfinite(final["mlm_loss"]) and np.isfinite(final["nsp_loss"])
    _assert_fsdp_sharded(probe["params"])
    # Trained on articles 0-31 (the vocabulary's sample among them), evaluated on 32-39 alone.
    reads = _reads(probe)
    assert set(reads) == {"train[:-8]", "train[-8:]"}
    assert {row[:2] for row in reads["train[-8:]"]} == {("train", i) for i in range(32, 40)}
    assert {row[:2] for row in reads["train[:-8]"]} <= {("train", i) for i in range(32)}
    assert _examples(reads, "train[:-8]") and not (_examples(reads, "train[:-8]") &
                                                   _examples(reads, "train[-8:]"))
    cached = list((tmp_path / "data" / "vocab").glob("wikipedia*sample20*.json"))
    assert cached, "the vocabulary was trained on the sample of 20 articles"


def test_the_wikipedia_stream_runs_in_worker_processes_on_the_mock(tmp_path):
    """With data.worker_count=2 the stream's articles are read in grain's spawned workers,
    which unpickle the mocked source where TFDS is not mocked: it opens again under a mock of
    their own (tests/tfds_mock.py). Without that they read no prose and the run made no batch
    (now the stream's DataError; before it, the run read on until the timeout here).
    benchmarks/gpu_recipes.py runs the recipes this way."""
    workdir = tmp_path / "bert"
    result = run_python(["tests/scripts/recipe_run.py", "64", "--config",
                         "configs/bert/pretrain.py:size=base,data=wikipedia,smoke",
                         "--workdir", str(workdir), "--config.data.worker_count=2"],
                        env={"PAPERS_JAX_DATA": str(tmp_path / "data")}, timeout=240)
    assert '{"code": 0}' in result.stdout, result.stderr[-3000:]
    train = _log(workdir, "train")
    assert [entry["step"] for entry in train] == [4, 8, 12]
    assert all(entry["mlm_loss"] > 0 and 0 < entry["nsp_random_fraction"] < 1
               for entry in train)


def test_a_mocked_source_unpickles_under_its_mock_only():
    """Within mock_tfds a mocked source pickles and reads back the same examples; in the main
    process after the mock closed it is refused (a mock opened there for good would fake
    TFDS for the rest of the session), and under a mock of another size too."""
    import pickle

    from tfds_mock import mock_tfds

    from data.builders.sources import get_data_source

    with mock_tfds(10):
        source = get_data_source("wikipedia/20230601.en", "train[:-2]", source="tfds")
        blob = pickle.dumps(source)
        again = pickle.loads(blob)
        assert len(again) == 8 and again[3]["text"] == source[3]["text"]
    with pytest.raises(RuntimeError, match="unpickled outside tests/tfds_mock.py's mock_tfds"):
        pickle.loads(blob)
    with mock_tfds(12), pytest.raises(RuntimeError, match="mocked with 10 examples a split"):
        pickle.loads(blob)


def test_vit_pretrains_on_imagenet_then_finetunes_from_it_at_a_higher_resolution(tmp_path):
    """stage=pretrain (Adam, weight decay 0.3, cosine, clipping, Inception crops of images of
    any size, the pre-logits head) at 32 px, then stage=finetune from its workdir at 48 px (SGD
    with momentum, a new zero head, the rest from the pretraining run's last checkpoint, its
    position embeddings resampled from the 4 x 4 patch grid to 6 x 6)."""
    pretrain = tmp_path / "vit"
    code, stderr, probe = _train(tmp_path, 48, "configs/vit/imagenet.py:smoke", pretrain)
    assert code == 0, stderr[-3000:]
    command = json.loads((pretrain / "record.json").read_text())["command"]  # mock data named
    assert command[:5] == ["python", "tests/scripts/recipe_run.py", "48", "--config",
                           "configs/vit/imagenet.py:smoke"]
    config = _config(pretrain)
    assert (config["optimizer"]["name"], config["optimizer"]["weight_decay"],
            config["optimizer"]["schedule"], config["optimizer"]["clip_norm"]) == (
                "adamw", 0.3, "cosine", 1.0)
    assert (config["data"]["augment"], config["data"]["eval_resize"]) == ("inception_crop",
                                                                          "center_crop")
    assert config["model"]["head_hidden_size"] == 32 and config["model"]["dropout_rate"] == 0.1
    assert _log(pretrain, "eval")[-1]["step"] == 6
    # 16 images of 32 x 32 a step, 4 a device; the weights sharded over fsdp.
    assert _batches(probe, "image") == [([16, 32, 32, 3], [4, 32, 32, 3])] * 6
    _assert_fsdp_sharded(probe["params"], without_embed=("head/kernel",))  # (mlp, classes)
    reads = _reads(probe)  # evaluated on the validation split's own images
    assert _examples(reads, "validation") and not (_examples(reads, "validation") &
                                                   _examples(reads, "train"))

    finetune = tmp_path / "vit_ft"
    code, stderr, probe = _train(
        tmp_path, 48, f"configs/vit/imagenet.py:stage=finetune,init={pretrain},smoke", finetune)
    assert code == 0, stderr[-3000:]
    assert f"weights: the run in {pretrain}, its latest checkpoint" in stderr
    assert ("position embeddings resampled bilinearly, the corner patches on each other, as the "
            "released code (image 32x32 -> 48x48, patch grid 4x4 -> 6x6; ViT Sec. 3.2), class "
            "token's kept") in stderr
    assert "pre-logits layer dropped" in stderr
    assert "new zero-initialised classifier for 1000 classes (a new head asked for)" in stderr
    config = _config(finetune)
    assert (config["optimizer"]["name"], config["optimizer"]["momentum"],
            config["optimizer"]["weight_decay"]) == ("sgd", 0.9, 0.0)
    assert config["model"]["image_size"] == [48, 48] and config["model"]["head_hidden_size"] == 0
    assert config["data"]["eval_resize"] == "resize"
    assert 0 <= _log(finetune, "eval")[-1]["accuracy"] <= 1
    # The weights read from the checkpoint are placed sharded like trained ones; 48 px crops.
    assert _batches(probe, "image") == [([16, 48, 48, 3], [4, 48, 48, 3])] * 6
    _assert_fsdp_sharded(probe["params"])
    assert probe["params"]["posemb/embedding"]["shape"] == [1 + 6 * 6, 32]

    # What the fine-tuning run started from, read here on one device from the checkpoint that 4
    # wrote: the pretraining run's last weights, the position table resampled (the class
    # token's row as it was), no pre-logits layer, a new head.
    from train.checkpointing import load_params
    from train.vit_init import resolve_init

    from configs.vit.imagenet import get_config

    init = resolve_init(get_config(f"stage=finetune,init={pretrain},smoke"))
    trained = load_params(pretrain)
    table, resampled = trained["posemb"]["embedding"], init.params["posemb"]["embedding"]
    assert table.shape == (1 + 4 * 4, 32) and resampled.shape == (1 + 6 * 6, 32)
    np.testing.assert_array_equal(resampled[0], table[0])
    grid = table[1:].reshape(4, 4, 32)  # the 6 x 6 grid's corner patch reads the 4 x 4's corner
    np.testing.assert_allclose(resampled[1:].reshape(6, 6, 32)[[0, 0, -1, -1], [0, -1, 0, -1]],
                               grid[[0, 0, -1, -1], [0, -1, 0, -1]], rtol=1e-6)
    np.testing.assert_array_equal(init.params["block_0"]["mlp"]["wi"]["kernel"],
                                  trained["block_0"]["mlp"]["wi"]["kernel"])
    assert init.fresh == ("head",) and "pre_logits" not in init.params


def test_transformer_trains_on_wmt14_and_scores_the_averaged_checkpoints(tmp_path):
    """size=base,data=wmt14: the paper's optimizer and schedule, label smoothing, packed rows,
    beam search and BLEU on the test split (newstest2014), the final eval of the average of the
    last checkpoints (3 in the smoke run, 5 at base)."""
    workdir = tmp_path / "wmt"
    code, stderr, probe = _train(
        tmp_path, 48, "configs/transformer/translate.py:size=base,data=wmt14,smoke", workdir)
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
    # Packed rows of 32 tokens, 8 a step, 2 a device; the weights sharded over fsdp.
    assert _batches(probe, "inputs") == [([8, 32], [2, 32])] * 12
    assert _batches(probe, "targets") == [([8, 32], [2, 32])] * 12
    _assert_fsdp_sharded(probe["params"])
    assert all(np.isfinite(e["loss"]) for e in _log(workdir, "train"))
    # Scored on the test split, newstest2014's stand-in: its own examples, not training ones.
    reads = _reads(probe)
    assert {row[:2] for row in reads["test"]} == {("test", i) for i in range(48)}
    assert _examples(reads, "train") and not _examples(reads, "test") & _examples(reads, "train")


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


def test_the_finetuning_recipe_plans_224_px_pretraining_at_384_px(tmp_path):
    """The paper-scale recipe (ViT-B/16): stage=finetune on a stage=pretrain run's workdir plans
    its 14 x 14 patch grid's position embeddings resampled to 24 x 24 (Sec. 3.2), the pre-logits
    layer dropped and a new zero head (App. B.1.1), from the pretraining run's config.json alone
    (what --print_config shows; no weights read)."""
    from train.tasks.classify import ClassificationTask

    from configs.vit.imagenet import get_config

    pretrain = tmp_path / "pretrain"
    pretrain.mkdir()
    (pretrain / "config.json").write_text(get_config().to_json())
    plan = ClassificationTask.plan(get_config(f"stage=finetune,init={pretrain}"))
    cfg = plan.model_config
    assert (cfg.image_size, cfg.grid, cfg.patch_size, cfg.hidden_size) == (
        (384, 384), (24, 24), 16, 768)
    assert (cfg.head_hidden_size, cfg.num_classes, cfg.dropout_rate) == (0, 1000, 0.0)
    notes = "\n".join(plan.notes)
    assert "patch grid 14x14 -> 24x24" in notes and "class token's kept" in notes
    assert "pre-logits layer dropped" in notes and "a new head asked for" in notes


def test_a_position_table_the_recipe_cannot_resample_is_refused_at_another_resolution(tmp_path):
    """A pretraining run with a 2-D row/column table fine-tuned at another resolution: refused,
    naming the table and the way out; at the pretraining resolution it fine-tunes."""
    from train.config import ConfigError
    from train.tasks.classify import ClassificationTask

    from configs.vit.imagenet import get_config

    pretrain = tmp_path / "pretrain"
    pretrain.mkdir()
    saved = get_config("smoke")
    saved.model.posemb = "learned_2d"
    (pretrain / "config.json").write_text(saved.to_json())
    with pytest.raises(ConfigError, match="posemb='learned_2d'.*not resampled.*fine-tune at "
                                          "the checkpoint's image_size"):
        ClassificationTask.plan(get_config(f"stage=finetune,init={pretrain},smoke"))
    plan = ClassificationTask.plan(get_config(f"stage=finetune,init={pretrain},resolution=32,"
                                              "smoke"))
    assert plan.model_config.posemb == "learned_2d" and plan.model_config.grid == (4, 4)
