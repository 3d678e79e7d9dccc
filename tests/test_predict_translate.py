"""python -m train.predict WORKDIR on a translation run: batched translations equal the run's own
beam search (or greedy search) of each sentence alone, up to its input length + 50 tokens, with
the run's beam settings unless overridden; sentences from arguments, a file or stdin; a sentence
longer than the run's inputs is cut with a message; clear errors for empty input."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from random_params import randomised
from tiny_runs import predictor_args, train

from data.vocab.sentencepiece import EOS_ID
from models import decode as decoding
from train.config import ConfigError
from train.predict import load_run
from train.predict import translate as translate_predictor

SENTENCES = ["In the beginning God created the heaven and the earth.",
             "And God said, Let there be light: and there was light.",
             "And the evening and the morning were the first day.",
             "Jesus wept."]


@pytest.fixture(scope="module")
def translation_run(tmp_path_factory, bible_data_root):
    """The smoke Transformer trained for 3 steps on the Bible fixture, each sentence decoded up
    to its input length + 50 (no cap: task.max_decode_length=0)."""
    return train(tmp_path_factory.mktemp("translate_run"), "configs/transformer/translate.py:smoke",
                 bible_data_root, "--config.train.num_steps=3", "--config.train.eval_every=0",
                 "--config.optimizer.warmup_steps=1", "--config.task.max_decode_length=0")


@pytest.fixture(scope="module")
def varied_run(translation_run):
    """The run with random parameters instead of what 3 steps left (a model that ends every
    sentence at once): translations of many tokens, which beam and greedy search tell apart."""
    run = load_run(translation_run)
    run.params = randomised(run.params, scale=0.3, seed=1)
    return run


def _alone(run, sentence: str | list[int], beam_size: int, alpha: float) -> tuple[str, int]:
    """(the translation, its length in tokens with EOS) of one sentence (or its ids) searched by
    itself: models/decode.py predict on its ids + EOS, limited to their number + 50."""
    model = translate_predictor.model_of(run)
    pieces = run.tokenizer.encode(sentence) if isinstance(sentence, str) else sentence
    ids = np.asarray([pieces + [EOS_ID]], np.int32)
    width = len(ids[0]) + 50
    tokens, _ = decoding.predict(model, run.params, ids, beam_size=beam_size, alpha=alpha,
                                 max_decode_len=width, eos_id=EOS_ID,
                                 bos_id=model.config.start_id(run.tokenizer.bos_id))
    tokens = np.asarray(tokens[0]).tolist()
    length = tokens.index(EOS_ID) + 1 if EOS_ID in tokens else len(tokens)
    return run.tokenizer.decode(tokens), length


def test_batched_translations_are_each_sentences_own_search(varied_run):
    run = varied_run
    task = run.config["task"]
    assert (task["beam_size"], task["length_penalty"]) == (2, 0.6)  # the smoke run's settings
    printed = []
    beam = translate_predictor.predict(run, predictor_args(
        translate_predictor, *sum((["--sentence", s] for s in SENTENCES), []),
        "--batch_size", "3"), out=printed.append)
    want = [_alone(run, s, 2, 0.6) for s in SENTENCES]
    assert beam == printed == [text for text, _ in want]
    greedy = translate_predictor.predict(run, predictor_args(
        translate_predictor, "--decoding", "greedy", *sum((["--sentence", s] for s in SENTENCES),
                                                          [])), out=len)
    greedy_want = [_alone(run, s, 1, 0.6) for s in SENTENCES]
    assert greedy == [text for text, _ in greedy_want]
    assert greedy != beam  # so the two are told apart above
    wider = translate_predictor.predict(run, predictor_args(
        translate_predictor, "--sentence", SENTENCES[0], "--beam_size", "3", "--alpha", "1.0"),
        out=len)
    assert wider == [_alone(run, SENTENCES[0], 3, 1.0)[0]]
    # Random weights rarely stop by themselves: a sentence's limit, its ids + EOS + 50, binds
    limits = [len(run.tokenizer.encode(s)) + 1 + 50 for s in SENTENCES]
    assert all(length <= limit for (_, length), limit in zip(want, limits))
    assert any(length == limit for (_, length), limit in zip(want, limits))
    trained = load_run(run.workdir)  # the weights as trained agree too
    assert translate_predictor.predict(trained, predictor_args(
        translate_predictor, "--sentence", SENTENCES[0]), out=len) == \
        [_alone(trained, SENTENCES[0], 2, 0.6)[0]]


def test_sentences_from_a_file_or_stdin_and_a_long_one_cut(varied_run, tmp_path):
    run = varied_run
    file = tmp_path / "sentences.txt"
    file.write_text("\n".join(SENTENCES[:2]) + "\n")
    args = ("--decoding", "greedy")
    from_file = translate_predictor.predict(
        run, predictor_args(translate_predictor, "--file", str(file), *args), out=len)
    from_stdin = translate_predictor.predict(
        run, predictor_args(translate_predictor, *args), out=len,
        stdin=io.StringIO("\n".join(SENTENCES[:2])))
    assert from_file == from_stdin == [_alone(run, s, 1, 0.6)[0] for s in SENTENCES[:2]]
    long = " ".join(SENTENCES)  # more than the run's 32 tokens (data.max_length)
    notes = []
    got = translate_predictor.predict(run, predictor_args(translate_predictor, "--sentence",
                                                          long, *args),
                                      out=len, note=notes.append)
    ids = run.tokenizer.encode(long)
    assert notes == [f"sentence 1 has {len(ids) + 1} tokens with EOS; the run reads at most "
                     "config.data.max_length=32: its first 31 are translated"]
    assert got == [_alone(run, ids[:31], 1, 0.6)[0]]


def test_errors_name_the_problem(translation_run):
    run = load_run(translation_run)
    for argv, stdin, message in (
            (["--sentence", "ok", "--sentence", "  "], None,
             "sentence 2 of --sentence is empty (remove the blank lines)"),
            ([], io.StringIO(""), "no sentence in standard input"),
            (["--sentence", "x", "--decoding", "greedy", "--beam_size", "4"], None,
             "--beam_size=4 with --decoding greedy"),
            (["--sentence", "x", "--decoding", "greedy", "--alpha", "1.0"], None,
             "--alpha=1.0 with --decoding greedy"),
            (["--sentence", "x", "--alpha", "-1"], None, "--alpha=-1.0 must be a finite number"),
            (["--sentence", "x", "--alpha", "nan"], None, "--alpha=nan must be a finite number"),
            (["--sentence", "x", "--beam_size", "100000"], None,
             "--beam_size=100000 is more than the run's"),
            (["--sentence", "x", "--beam_size", "1", "--alpha", "1.0"], None,
             "--alpha=1.0 with a beam of 1"),
            (["--sentence", "x", "--batch_size", "0"], None, "--batch_size=0 must be >= 1"),
            (["--sentence", "x", "--file", "f.txt"], None,
             "--sentence and --file f.txt: give one of them")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            translate_predictor.predict(run, predictor_args(translate_predictor, *argv),
                                        stdin=stdin, out=len)


def test_input_that_is_not_utf8_is_named_by_its_line(translation_run, tmp_path):
    run = load_run(translation_run)
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("fine\nno hay man\xf1ana\n".encode("latin-1"))
    surrogate = io.StringIO("fine\n" + b"ma\xf1ana".decode("utf-8", "surrogateescape"))
    for argv, stdin, message in (
            (["--file", str(latin)], None, f"--file {latin}: line 2 is not UTF-8 text (byte 0xf1)"),
            ([], surrogate, "sentence 2 of standard input is not UTF-8 text")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            translate_predictor.predict(run, predictor_args(translate_predictor, *argv),
                                        stdin=stdin, out=len)
