"""python -m train.predict WORKDIR on the runs of the distillation tasks: a DeiT student classifies
image files with its two heads' softmaxes averaged (what its evaluation scores), a task-distilled
BERT student tags words with its own head, and a general-distillation student fills [MASK]s with
its masked-LM head; each against the student's model applied directly to the same input."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from distill_teachers import teachers  # noqa: F401 (a fixture)
from tiny_runs import data_root, predictor_args, train

from models.bert import BertConfig
from models.bert_pretraining import BertForPreTraining
from models.vit import ViT, ViTConfig
from train import run_config
from train.losses import averaged_heads
from train.predict import __main__ as predict_cli
from train.predict import bert_pretrain, classify, finetune, load_run
from train.tasks.classify import model_input
from train.tasks.finetune import head_model

QUICK = ("--config.train.num_steps=3", "--config.train.eval_every=0",
         "--config.train.checkpoint_every=3", "--config.optimizer.warmup_steps=1",
         "--config.train.progress_bar=False")


@pytest.fixture(scope="module")
def deit_run(tmp_path_factory, fixture_data_root):
    """A smoke DeiT student (class and distillation tokens) of a smoke convnet teacher."""
    root = tmp_path_factory.mktemp("deit_predict")
    teacher = train(root / "teacher", "configs/vit/convnet_teacher.py:smoke", fixture_data_root,
                    *QUICK)
    return train(root / "student", f"configs/vit/deit.py:smoke,teacher={teacher}",
                 fixture_data_root, *QUICK)


def test_a_deit_student_averages_its_two_heads(deit_run, fixture_data_root, tmp_path):
    run = load_run(deit_run)
    cfg = run_config.saved_model(ViTConfig, run.config, run.workdir)
    assert cfg.distill_token and run.task == "deit"
    with data_root(fixture_data_root):
        preprocess = classify.Preprocess(run, None, note=len)
    rng = np.random.default_rng(0)
    files = []
    for i in range(3):  # images of the run's own shape: nothing to convert
        np.save(tmp_path / f"{i}.npy", rng.integers(0, 256, preprocess.shape, dtype=np.uint8))
        files.append(str(tmp_path / f"{i}.npy"))
    printed = []
    with data_root(fixture_data_root):
        got = classify.predict(run, predictor_args(classify, *sum((["--image", f] for f in files),
                                                                  []), "--top_k", "10"),
                               out=printed.append, note=len)
    inputs = model_input(np.stack([preprocess(f) for f in files]), cfg.image_size)
    class_logits, distill_logits = ViT(cfg).apply({"params": run.params}, inputs, train=False)
    want = np.exp(np.asarray(averaged_heads(class_logits, distill_logits)))
    # Not either head alone: the heads of a trained student differ.
    assert not np.allclose(want, np.asarray(jax.nn.softmax(class_logits)), atol=1e-4)
    for ranked, p in zip(got, want):
        order = np.argsort(-p, kind="stable")
        assert [prob for _, prob in ranked] == pytest.approx(p[order], abs=1e-5)
        assert sum(prob for _, prob in ranked) == pytest.approx(1.0, abs=1e-5)
    assert len(printed) == 3 and printed[0].startswith(files[0])


@pytest.fixture(scope="module")
def students(teachers, tmp_path_factory, brown_data_root):  # noqa: F811 (the fixture)
    """{'task': a Brown POS student of the fine-tuned teacher, 'general': a masked-LM student
    of the pretrained one}, 3 steps each."""
    root = tmp_path_factory.mktemp("distilled")
    spec = "configs/bert/distill.py"
    return {
        "task": train(root / "task", f"{spec}:mode=task,task=brown_pos,smoke,"
                      f"teacher={teachers['finetune']}", brown_data_root, *QUICK,
                      "--config.data.eval_split=test"),
        "general": train(root / "general", f"{spec}:smoke,teacher={teachers['pretrain']}",
                         brown_data_root, *QUICK),
    }


def test_a_task_distilled_student_tags_with_its_own_head(students, brown_data_root):
    run = load_run(students["task"])
    assert run.task == "distill_finetune"
    text = "The jury said it did find that the city was fine ."
    with data_root(brown_data_root):
        (tagged,) = finetune.predict(run, predictor_args(finetune, "--text", text), out=len,
                                     note=len)
        dataset = finetune.dataset_of(run)
        encoder = bert_pretrain.encoder_of(run, "tag", dataset.num_labels)
    words = text.split()
    row, _, _ = encoder({"words": words, "tags": [0] * len(words)})
    cfg = run_config.saved_model(BertConfig, run.config, run.workdir)
    assert cfg.num_layers == 2  # the student: half the teacher's 4 layers
    logits = head_model("tag", cfg, dataset.num_labels).apply(
        {"params": run.params}, row["input_ids"][None], row["segment_ids"][None],
        row["input_mask"][None], train=False)[0]
    first = row["labels"] != -100
    want = [dataset.labels[int(t)] for t in np.argmax(np.asarray(logits), -1)[first]]
    assert [word for word, _ in tagged] == words
    assert [tag for _, tag in tagged] == want


def test_a_general_student_fills_masks_with_its_masked_lm_head(students, brown_data_root,
                                                               capsys):
    run = load_run(students["general"])
    assert run.task == "distill_pretrain"
    text = "the [MASK] of the county was [MASK] ."
    (ranked,) = bert_pretrain.predict(run, predictor_args(bert_pretrain, "--text", text,
                                                          "--top_k", "3"), out=len)
    rows = bert_pretrain.rows_of(run, [text])
    cfg = run_config.saved_model(BertConfig, run.config, run.workdir)
    assert not cfg.nsp and cfg.num_layers == 2
    batch = {k: v[None] for k, v in rows[0].items()}
    outputs = BertForPreTraining(cfg).apply(
        {"params": run.params}, batch["input_ids"], batch["segment_ids"], batch["input_mask"],
        masked_positions=batch["masked_positions"], train=False, with_nsp=False)
    p = np.asarray(jax.nn.softmax(outputs["mlm_logits"][0], -1))
    assert len(ranked) == 2
    for choices, probabilities in zip(ranked, p):
        top = np.argsort(-probabilities, kind="stable")[:3]
        assert [token for token, _ in choices] == [run.tokenizer.id_to_token(int(i))
                                                   for i in top]
        assert [prob for _, prob in choices] == pytest.approx(probabilities[top], abs=1e-5)
    # The command line reaches the same predictor.
    assert predict_cli.main([str(students["general"]), "--text", text]) == 0
    assert "[MASK]" not in capsys.readouterr().out.splitlines()[0]
