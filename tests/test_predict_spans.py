"""python -m train.predict WORKDIR on the span and multiple-choice kinds of BERT fine-tuning: a
question and its context give the context's characters under the best span (checked against a
brute-force NumPy search of every allowed span of the run's own logits), a context and its
choices the choice of highest probability; inputs of the wrong shape are errors that say so."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from finetune_examples import register
from tiny_runs import predictor_args, train

from models.bert import BertConfig
from train import run_config
from train.config import ConfigError
from train.predict import finetune, load_run
from train.tasks.finetune import head_model

FINETUNE = "configs/bert/finetune.py:smoke,init=scratch"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Smoke runs (3 steps, scratch vocabularies) on the generated span and multiple-choice
    data (tests/finetune_examples.py)."""
    root = tmp_path_factory.mktemp("span_root")
    return {kind: train(tmp_path_factory.mktemp(kind), FINETUNE, root,
                        f"--config.data.name={register(kind)}", "--config.train.num_steps=3",
                        "--config.train.eval_every=0",
                        "--config.task.max_answer_length=2")  # shorter than the contexts
            for kind in ("span", "multiple_choice")}


def _logits(run, kind, row):
    cfg = run_config.saved_model(BertConfig, run.config, run.workdir)
    return head_model(kind, cfg, 0).apply(
        {"params": run.params}, *(row[k][None] for k in ("input_ids", "segment_ids",
                                                          "input_mask")), train=False)


def test_a_span_run_answers_with_the_best_span_of_the_context(runs):
    run = load_run(runs["span"])
    longest = run.config["task"]["max_answer_length"]
    questions = [("where is the zebra", "red river zebra stone cloud"),
                 ("where is the zebra", "the quick zebra sleeps by the house of stone"),
                 ("where", "zebra north south east west river stone cloud tree house"),
                 ("where is the quick zebra by the river and the stone house in the cloud",
                  "tree zebra")]  # mostly question: the answer must still be in the context
    printed = []
    got = finetune.predict(run, predictor_args(finetune, *sum(
        (["--text", f"{q}\t{c}"] for q, c in questions), []), "--batch_size", "1"),
        out=printed.append)
    encoder = finetune.encoder_of(run, "span", 0,
                                  max_query_length=run.config["data"]["max_query_length"])
    for (question, context), (answer, probability), line in zip(questions, got, printed):
        row, _, _ = encoder({"question": question, "context": context, "answers": []})
        start_logits, end_logits = (np.asarray(x[0], np.float64)
                                    for x in _logits(run, "span", row))
        inside = np.flatnonzero(row["context_mask"])
        best = max(((s, e) for s in inside for e in inside if s <= e < s + longest),
                   key=lambda se: start_logits[se[0]] + end_logits[se[1]])
        _, offsets = run.tokenizer.encode_with_offsets(context)
        first = inside[0]
        assert answer == context[offsets[best[0] - first][0]:offsets[best[1] - first][1]]
        assert answer and answer in context
        p_start = np.exp(start_logits[inside] - np.logaddexp.reduce(start_logits[inside]))
        p_end = np.exp(end_logits[inside] - np.logaddexp.reduce(end_logits[inside]))
        assert probability == pytest.approx(p_start[best[0] - first] * p_end[best[1] - first],
                                            rel=1e-4)
        assert line == f"{answer}\t{probability:.4f}"


def test_a_multiple_choice_run_picks_the_most_probable_choice(runs):
    run = load_run(runs["multiple_choice"])
    text = "a walk by the river\tred blue\tstone cloud tree\tsmall quick"
    printed = []
    ((index, choice, probability),) = finetune.predict(
        run, predictor_args(finetune, "--text", text), out=printed.append)
    row, _, _ = finetune.encoder_of(run, "multiple_choice", 0, num_choices=3)(
        {"context": "a walk by the river", "choices": text.split("\t")[1:], "label": 0})
    p = np.asarray(jax.nn.softmax(_logits(run, "multiple_choice", row)[0]))
    assert index == int(np.argmax(p)) and choice == text.split("\t")[1 + index]
    assert probability == pytest.approx(float(p.max()), rel=1e-5)
    assert printed == [f"{index + 1} {probability:.4f}\t{choice}"]


def test_inputs_of_the_wrong_shape_are_named(runs):
    for kind, text, message in (
            ("span", "where is the zebra", "text 1 is not a question and its context: give its "
                                           "2 parts with one TAB between each two (found 1)"),
            ("multiple_choice", "a context\tone\ttwo", "text 1 is not a context and the run's 3 "
                                                       "choices: give its 4 parts")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            finetune.predict(load_run(runs[kind]), predictor_args(finetune, "--text", text),
                             out=len)


def test_the_answer_lies_in_the_context_and_within_the_longest_span():
    """Logits highest outside the context, and a longer span scoring best: the answer is still
    the best allowed one (and its probability is over the context's tokens alone)."""
    start = np.array([[9.0, 8.0, 1.0, 0.0, 3.0, 0.5, 9.0]])
    end = np.array([[9.0, 7.0, 0.0, 0.2, 0.1, 4.0, 9.0]])
    context = np.array([[0, 0, 1, 1, 1, 1, 0]])
    got = {k: np.asarray(v) for k, v in finetune.span_answer(start, end, context, 2).items()}
    assert (int(got["start"][0]), int(got["end"][0])) == (4, 5)  # (2, 5) scores more: too long
    p_start = np.exp(start[0, 2:6]) / np.exp(start[0, 2:6]).sum()
    p_end = np.exp(end[0, 2:6]) / np.exp(end[0, 2:6]).sum()
    assert float(got["probability"][0]) == pytest.approx(p_start[2] * p_end[3], rel=1e-6)
