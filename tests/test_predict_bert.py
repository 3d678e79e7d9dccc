"""python -m train.predict WORKDIR on BERT runs: the [MASK]s of a pretraining run filled with the
masked-LM head's own top tokens and probabilities; a fine-tuned classifier's label and
probability and a tagger's tag per word (read at each word's first piece) equal the head's own
outputs on inputs built here by hand; clear errors for a text without [MASK] and a run kind
without a predictor."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from finetune_examples import register
from tiny_runs import data_root, predictor_args, train

from models.bert import BertConfig
from models.bert_pretraining import BertForPreTraining
from train import run_config
from train.config import ConfigError
from train.predict import bert_pretrain, finetune, load_run
from train.tasks.finetune import head_model

FINETUNE = "configs/bert/finetune.py:smoke,init=scratch"


@pytest.fixture(scope="module")
def pretrain_run(tmp_path_factory, brown_data_root):
    return train(tmp_path_factory.mktemp("bert_run"), "configs/bert/pretrain.py:smoke",
                 brown_data_root, "--config.data.names=('brown',)", "--config.train.num_steps=3",
                 "--config.train.eval_every=0",
                 "--config.optimizer.warmup_steps=1")


@pytest.fixture(scope="module")
def finetune_runs(tmp_path_factory):
    """Smoke fine-tuning runs (3 steps, scratch vocabularies) on generated classify and tag
    data (tests/finetune_examples.py), registered in this process."""
    root = tmp_path_factory.mktemp("finetune_root")
    runs = {}
    for kind in ("classify", "tag"):
        name = register(kind)
        runs[kind] = train(tmp_path_factory.mktemp(f"finetune_{kind}"), FINETUNE, root,
                           f"--config.data.name={name}", "--config.train.num_steps=3",
                           "--config.train.eval_every=0")
    return runs


def _ids(tok, pieces: list[int], length: int) -> dict[str, np.ndarray]:
    """[CLS] pieces [SEP], padded to `length`, as one batch row of BERT's inputs."""
    ids = [tok.cls_id, *pieces, tok.sep_id]
    row = np.full((1, length), tok.pad_id, np.int32)
    row[0, :len(ids)] = ids
    mask = (row != tok.pad_id).astype(np.int32)
    return {"input_ids": row, "segment_ids": np.zeros_like(row), "input_mask": mask}


def test_masks_are_filled_with_the_mlm_heads_top_tokens(pretrain_run):
    run = load_run(pretrain_run)
    tok = run.tokenizer
    texts = ["the [MASK] of the house was [MASK] .", "he said [MASK] to her", "[MASK]"]
    printed = []
    got = bert_pretrain.predict(run, predictor_args(bert_pretrain, *sum(
        (["--text", t] for t in texts), []), "--top_k", "3", "--batch_size", "2"),
        out=printed.append)
    model = BertForPreTraining(run_config.saved_model(BertConfig, run.config, run.workdir))
    length = run.config["data"]["max_seq_length"]
    for text, ranked in zip(texts, got):
        pieces = tok.encode(text)
        assert pieces.count(tok.mask_id) == text.count("[MASK]")  # kept whole by the vocabulary
        inputs = _ids(tok, pieces, length)
        positions = np.flatnonzero(inputs["input_ids"][0] == tok.mask_id)[None]
        logits = model.apply({"params": run.params}, inputs["input_ids"], inputs["segment_ids"],
                             inputs["input_mask"], masked_positions=positions)["mlm_logits"][0]
        p = np.asarray(jax.nn.softmax(logits, -1))
        assert len(ranked) == len(positions[0])
        for choices, q in zip(ranked, p):
            top = np.argsort(-q)[:3]
            assert [t for t, _ in choices] == [tok.id_to_token(int(i)) for i in top]
            np.testing.assert_allclose([x for _, x in choices], q[top], rtol=1e-5, atol=1e-7)
    assert printed[0] == texts[0].replace("[MASK]", got[0][0][0][0], 1).replace(
        "[MASK]", got[0][1][0][0], 1)
    assert printed[1].startswith("  [MASK] 1: ")
    with pytest.raises(ConfigError, match=re.escape("text 2 has no [MASK] to fill")):
        bert_pretrain.predict(run, predictor_args(bert_pretrain, "--text", "a [MASK]", "--text",
                                                  "no mask"), out=len)


def test_a_text_longer_than_the_run_is_cut_and_said_so(pretrain_run):
    """As the fine-tuning and translation predictors say it; a [MASK] the cut drops is an
    error (the note would not do: there would be nothing to fill)."""
    run = load_run(pretrain_run)
    length = run.config["data"]["max_seq_length"]
    long = "[MASK] " + " ".join(["the"] * 2 * length)
    notes = []
    (ranked, short) = bert_pretrain.predict(
        run, predictor_args(bert_pretrain, "--text", "a [MASK]", "--text", long), out=len,
        note=notes.append)
    assert len(ranked) == len(short) == 1
    assert notes == [f"text 2 was cut to config.data.max_seq_length={length} pieces"]
    with pytest.raises(ConfigError, match=re.escape(f"text 1: a [MASK] lies beyond the run's "
                                                    f"config.data.max_seq_length={length}")):
        bert_pretrain.predict(run, predictor_args(bert_pretrain, "--text", long + " [MASK]"),
                              out=len, note=notes.append)


def _head(run, kind):
    task = run.config["task"]
    return head_model(kind, run_config.saved_model(BertConfig, run.config, run.workdir),
                      len(finetune.dataset_of(run).labels), features=task["features"],
                      head_hidden=task["head_hidden"], feature_head=task["feature_head"])


def test_a_classifier_gives_its_heads_label_and_probability(finetune_runs):
    run = load_run(finetune_runs["classify"])
    tok, labels = run.tokenizer, finetune.dataset_of(run).labels
    texts = ["red blue green black", "river stone cloud tree house", "quick happy sad north"]
    printed = []
    got = finetune.predict(run, predictor_args(finetune, *sum((["--text", t] for t in texts),
                                                              []), "--batch_size", "2"),
                           out=printed.append)
    model = _head(run, "classify")
    for text, (label, prob), line in zip(texts, got, printed):
        inputs = _ids(tok, tok.encode(text), run.config["data"]["max_seq_length"])
        p = np.asarray(jax.nn.softmax(model.apply({"params": run.params}, *inputs.values())[0]))
        assert (label, prob) == (labels[int(np.argmax(p))], pytest.approx(float(p.max()),
                                                                              rel=1e-5))
        assert line == f"{label} {prob:.4f}\t{text}"


def test_a_tagger_gives_a_tag_per_word_at_its_first_piece(finetune_runs):
    run = load_run(finetune_runs["tag"])
    tok, labels = run.tokenizer, finetune.dataset_of(run).labels
    # words the scratch vocabulary cuts into several pieces: the tag is read at the first
    text = "red treehouse blue stonewest river"
    printed = []
    got = finetune.predict(run, predictor_args(finetune, "--text", text), out=printed.append)
    pieces, first = [], []
    for word in text.split():
        first.append(len(pieces) + 1)  # after [CLS]
        pieces += tok.encode(word)
    assert len(pieces) > len(first)  # some word has more than one piece
    inputs = _ids(tok, pieces, run.config["data"]["max_seq_length"])
    logits = np.asarray(_head(run, "tag").apply({"params": run.params}, *inputs.values())[0])
    want = [(w, labels[int(np.argmax(logits[i]))]) for w, i in zip(text.split(), first)]
    assert got == [want]
    assert printed == [" ".join(f"{w}/{t}" for w, t in want)]
    long = " ".join(["red"] * 40)  # more words than the run's 32 pieces hold
    notes = []
    tagged = finetune.predict(run, predictor_args(finetune, "--text", long), out=len,
                              note=notes.append)
    assert len(tagged[0]) == 30 and notes == [
        "text 1: its last 10 words lie beyond config.data.max_seq_length=32 pieces and get no "
        "tag"]

