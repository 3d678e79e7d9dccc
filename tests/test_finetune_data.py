"""Fine-tuning data: email and tweet readers, their TFDS builders and hashed splits, Brown's
coarse tags, and the BERT input pipeline (pieces, segments, labels, truncation, state, padding).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from data.pipelines import finetune as ft
from data.pipelines.sharding import num_batches
from data.vocab import wordpiece
from data.corpora.brown_tags import COARSE_TAGS, base_tag, coarse_tag
from data.errors import DataError

SPAM_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "spam"
WORDS = ("the a cat dog sat on mat red blue big small walked quickly and zebra where is "
         "?").split()


@pytest.fixture(scope="module")
def tok():
    """A tiny uncased vocabulary: whole words plus '##s' and '##ly' continuations."""
    tokens = list(wordpiece.SPECIAL_TOKENS) + WORDS + ["##s", "##ly", "quick", "slow", ",", "."]
    return wordpiece.from_vocab({t: i for i, t in enumerate(dict.fromkeys(tokens))},
                                lowercase=True)


# ----------------------------------------------------------------------------- readers


def test_email_text_takes_subject_and_plain_parts_and_strips_html():
    from data.corpora.spam import email_text, strip_html

    multipart = (b"From: a@b.c\r\nSubject: =?iso-8859-1?q?Caf=E9_offer?=\r\nMIME-Version: 1.0\r\n"
                 b"Content-Type: multipart/alternative; boundary=XX\r\n\r\n--XX\r\n"
                 b"Content-Type: text/plain; charset=iso-8859-1\r\n"
                 b"Content-Transfer-Encoding: quoted-printable\r\n\r\nCheap   caf=E9\r\nnow!\r\n"
                 b"--XX\r\nContent-Type: text/html\r\n\r\n<b>ignored</b>\r\n--XX--\r\n")
    assert email_text(multipart) == "Café offer\n\nCheap café now!"
    html_only = (b"Subject: Hi\r\nContent-Type: text/html\r\n\r\n<html><head><title>t</title>"
                 b"</head><body><style>p {}</style><p>Win&nbsp;big<br>today &amp; now"
                 b"<!-- x --></p></body></html>")
    assert email_text(html_only) == "Hi\n\nWin big today & now"
    assert strip_html("<script>alert(1)</script>a<p>b</p>").split() == ["a", "b"]
    assert email_text(b"Subject: only\r\n\r\n") == "only"


def test_spam_builder_on_the_fixture(tmp_path, monkeypatch):
    from data import builders
    from data.corpora.splits import text_split
    from data.pipelines.finetune_datasets import get_dataset

    shutil.copytree(SPAM_FIXTURE / "package", tmp_path / "raw" / "spam" / "package")
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    builder = builders.prepare("spam")
    info = builder.info
    assert info.features["label"].names == ["ham", "spam"]
    sizes = {s: info.splits[s].num_examples for s in ("train", "validation", "test")}
    assert sizes == {"train": 79, "validation": 15, "test": 6}
    seen = set()
    for split in sizes:
        examples = get_dataset("spam").examples(split)
        texts = [examples[i]["text"] for i in range(len(examples))]
        assert all(text_split(t) == split for t in texts)  # the split is a function of the text
        ids = {builder.as_data_source(split)[i]["email_id"] for i in range(len(examples))}
        assert not ids & seen
        seen |= ids
    assert len(seen) == 100
    train = get_dataset("spam").examples("train")
    labels = [train[i]["label"] for i in range(len(train))]
    assert set(labels) == {0, 1}


def test_tweets_reader_and_builder_on_a_synthetic_csv(tmp_path, monkeypatch):
    """Written here (the real tweets must never be committed): invalid UTF-8, an empty
    confidence, a carriage return inside a quoted text."""
    from data import builders
    from data.corpora import tweets

    rows = [b"sentiment,confidence,text"]
    for i in range(60):
        label = ("negative", "neutral", "positive")[i % 3]
        rows.append(f"{label},0.{i % 10}5,tweet number {i} is {label}".encode())
    rows.append(b'positive,,"broken \xd1 bytes\r\nand a line"')
    csv = tmp_path / "raw" / "tweets" / tweets.CSV_PATH
    csv.parent.mkdir(parents=True)
    csv.write_bytes(b"\r\n".join(rows) + b"\r\n")
    parsed = list(tweets.read_tweets(csv))
    assert len(parsed) == 61 and parsed[-1].text == "broken bytes and a line"
    assert np.isnan(parsed[-1].confidence) and parsed[0].label == "negative"

    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    assert tweets.raw_file() == csv
    builder = builders.prepare("tweets")
    assert builder.info.features["label"].names == ["negative", "neutral", "positive"]
    assert sum(builder.info.splits[s].num_examples for s in ("train", "validation", "test")) == 61

    csv.write_bytes(b"sentiment,confidence,text\r\nangry,1,x\r\n")
    with pytest.raises(DataError, match="angry"):
        list(tweets.read_tweets(csv))


def test_brown_coarse_tags():
    cases = {"nn-tl": "NOUN", "vbd-hl": "VERB", "nn-tl-hl": "NOUN", "jj-nc": "ADJ",
             "dod*": "VERB", "md*": "VERB", "*": "ADV", "*-hl": "ADV", "ppss+md": "PRON",
             "ex+bez": "DET", "fw-nn": "X", "fw-in+at-tl": "X", "pp$": "PRON", "pp$$": "PRON",
             "nn$-tl": "NOUN", "wp$": "PRON", "cs": "ADP", "in": "ADP", "cc": "CONJ",
             "to": "PRT", "rp": "PRT", "cd": "NUM", "od": "ADJ", "``": ".", "---hl": ".",
             "uh": "X", "at": "DET", "ql": "ADV", "np$": "NOUN", "hvz*": "VERB"}
    for tag, coarse in cases.items():
        assert coarse_tag(tag) == coarse, tag
    assert set(cases.values()) == set(COARSE_TAGS)
    assert base_tag("bez*-hl") == "bez"
    with pytest.raises(DataError, match="no coarse tag"):
        coarse_tag("zz")


def test_brown_tasks_follow_the_document_split(brown_env):
    from data.pipelines.finetune_datasets import get_dataset

    genre = get_dataset("brown_genre")
    train, test = genre.examples("train"), genre.examples("test")
    assert len(train) > 50 and len(test) > 50
    assert {e["label"] for e in train} == {e["label"] for e in test}  # 5 genres in each
    assert not {e["text"] for e in train} & {e["text"] for e in test}
    with pytest.raises(DataError, match="use the 'test' split"):
        genre.examples("validation")  # one training document per genre: none held out
    pos = get_dataset("brown_pos").examples("test")
    assert all(len(e["words"]) == len(e["tags"]) for e in pos)
    # TFDS's split slices, over examples (paragraphs, sentences), as for the TFDS-built datasets
    assert list(genre.examples("train[:50%]")) == list(train[: round(len(train) / 2)])
    assert list(genre.examples("test[-3:]+train[:2]")) == [*test[-3:], *train[:2]]
    assert list(get_dataset("brown_pos").examples("test[10:12]")) == pos[10:12]
    with pytest.raises(DataError, match="no split 'dev'"):
        genre.examples("test+dev[:1]")
    with pytest.raises(DataError, match="slice"):
        genre.examples("test[:x]")
    assert max(t for e in pos for t in e["tags"]) < len(COARSE_TAGS)


# ----------------------------------------------------------------------------- encoding


def _ids(tok, text):
    return tok.encode(text)


def test_classify_and_pair_rows(tok):
    enc = ft.FeatureEncoder("classify", tok, 8, num_labels=2)
    row, cut, _ = enc({"text": "the cat sat", "label": 1})
    cls, sep, pad = tok.cls_id, tok.sep_id, tok.pad_id
    assert row["input_ids"].tolist() == [cls, *_ids(tok, "the cat sat"), sep] + [pad] * 3
    assert row["input_mask"].tolist() == [1] * 5 + [0] * 3 and not row["segment_ids"].any()
    assert not cut and row["label"] == 1
    row, cut, _ = enc({"text": "the cat sat on the red mat quickly", "label": 0})
    assert cut and row["input_ids"][-1] == sep and row["input_mask"].all()

    pair = ft.FeatureEncoder("pair_classify", tok, 10, num_labels=2)
    row, cut, _ = pair({"text_a": "the cat", "text_b": "a dog sat on the mat", "label": 1})
    a, b = _ids(tok, "the cat"), _ids(tok, "a dog sat on the mat")[:5]  # b loses its last 1
    assert cut and row["input_ids"].tolist() == [cls, *a, sep, *b, sep]
    assert row["segment_ids"].tolist() == [0] * 4 + [1] * 6
    assert ft.truncate_pair([1, 2, 3], [4, 5, 6], 4) == ([1, 2], [4, 5], True)
    assert ft.truncate_pair([1, 2, 3, 4], [5], 3) == ([1, 2], [5], True)


def test_truncate_pair_takes_from_the_longer_side_b_on_a_tie():
    """BERT's `_truncate_seq_pair` removes the last piece of the longer side, of b when both
    are equally long. In closed form: the longer side alone loses min(excess, gap) pieces,
    then the rest alternates starting with b, so b loses ceil(rest / 2) and a floor(rest / 2).
    Ties are where 'b on a tie' and 'a on a tie' differ: (2, 2, 3) must keep a whole."""
    assert ft.truncate_pair([1, 2], [3, 4], 3) == ([1, 2], [3], True)
    assert ft.truncate_pair([1, 2, 3], [4, 5], 3) == ([1, 2], [4], True)
    assert ft.truncate_pair([1], [2], 5) == ([1], [2], False)
    for la in range(8):
        for lb in range(8):
            for budget in range(1, 12):
                a, b = list(range(la)), list(range(100, 100 + lb))
                excess = max(0, la + lb - budget)
                gap = abs(la - lb)
                first = min(excess, gap)
                rest = excess - first
                cut_a = (first if la > lb else 0) + rest // 2
                cut_b = (first if lb > la else 0) + rest - rest // 2
                assert ft.truncate_pair(a, b, budget) == (
                    a[:la - cut_a], b[:lb - cut_b], excess > 0), (la, lb, budget)


def test_tag_labels_sit_on_the_first_piece_of_each_word(tok):
    enc = ft.FeatureEncoder("tag", tok, 12, num_labels=6)
    words = ["The", "cats", "walked", "slowly", "."]
    row, cut, _ = enc({"words": words, "tags": [1, 2, 3, 4, 5]})
    pieces = [tok.id_to_token(i) for i in row["input_ids"][row["input_mask"] == 1]]
    assert pieces == ["[CLS]", "the", "cat", "##s", "walked", "slow", "##ly", ".", "[SEP]"]
    assert row["labels"][:9].tolist() == [-100, 1, 2, -100, 3, 4, -100, 5, -100]
    assert (row["labels"][9:] == -100).all() and not cut
    np.testing.assert_array_equal(row["label_weights"], row["labels"] >= 0)
    short = ft.FeatureEncoder("tag", tok, 6, num_labels=6)
    row, cut, _ = short({"words": words, "tags": [1, 2, 3, 4, 5]})
    assert cut and row["labels"].tolist() == [-100, 1, 2, -100, 3, -100]
    assert row["num_words"] == 5 and short.padding()["num_words"] == 0  # the cut words too


def test_tag_word_erased_by_the_normalizer_keeps_its_place(tok):
    """A word that tokenizes to nothing (a control or zero-width character) becomes one [UNK]
    holding its tag, so the tags of the words after it stay on their own first pieces."""
    enc = ft.FeatureEncoder("tag", tok, 12, num_labels=6)
    words = ["the", "\u200b", "cats", "\x07", "sat"]
    row, cut, _ = enc({"words": words, "tags": [1, 2, 3, 4, 5]})
    pieces = [tok.id_to_token(i) for i in row["input_ids"][row["input_mask"] == 1]]
    assert pieces == ["[CLS]", "the", "[UNK]", "cat", "##s", "[UNK]", "sat", "[SEP]"]
    assert row["labels"][:8].tolist() == [-100, 1, 2, 3, -100, 4, 5, -100] and not cut
    assert (row["labels"][8:] == -100).all()


def test_span_answer_edges_inside_words_and_at_punctuation(tok):
    """Character spans map to exactly the pieces that overlap them: an answer ending where a
    '##' piece or a '.' starts (no space between) does not take that piece; one starting at a
    '##' piece starts there. An answer that begins in the kept context but runs past its cut is
    not found (weight 0, counted as dropped) rather than shortened to the kept pieces."""
    enc = ft.FeatureEncoder("span", tok, 24, max_query_length=4)
    context = "the red cats sat on the mat."
    # pieces: the red cat ##s sat on the mat .   (context starts at position 1 + 1 + 1 = 3)
    question = "where"
    first = len(tok.encode(question)) + 2
    cases = [((8, "cat"), (2, 2)), ((11, "s"), (3, 3)), ((8, "cats"), (2, 3)),
             ((24, "mat"), (7, 7)), ((24, "mat."), (7, 8)), ((4, "red cats sat"), (1, 4))]
    for (char_start, answer), (lo, hi) in cases:
        assert context[char_start:char_start + len(answer)] == answer
        row, _, weightless = enc({"question": question, "context": context,
                                  "answers": [(char_start, answer)]})
        assert (row["start_positions"], row["end_positions"]) == (first + lo, first + hi), answer
        assert not weightless and row["answer_weight"] == 1
    short = ft.FeatureEncoder("span", tok, first + 4 + 1, max_query_length=4)   # 4 pieces kept
    row, cut, weightless = short({"question": question, "context": context,
                                  "answers": [(4, "red cats sat")]})      # 'sat' is piece 5
    assert row["context_mask"].sum() == 4 and cut
    assert weightless and row["answer_weight"] == 0 and row["answer_starts"][0] == -1


def test_span_positions_and_truncation(tok):
    enc = ft.FeatureEncoder("span", tok, 16, max_query_length=4)
    context = "the red cat sat on the big mat"
    start = context.index("big mat")
    row, cut, weightless = enc({"question": "where is the zebra ?", "context": context,
                                "answers": [(start, "big mat"), (8, "cat")]})
    q = _ids(tok, "where is the zebra")  # the question is cut to 4 pieces
    first = len(q) + 2
    pieces = [tok.id_to_token(i) for i in row["input_ids"]]
    assert pieces[row["start_positions"]] == "big" and pieces[row["end_positions"]] == "mat"
    assert row["answer_starts"].tolist()[:2] == [first + 6, first + 2]
    assert row["answer_ends"].tolist() == [first + 7, first + 2, -1]
    assert row["context_mask"].sum() == 8 and row["context_mask"][first] == 1
    assert row["segment_ids"][first] == 1 and row["segment_ids"][first - 1] == 0
    # Cut counts the question's truncation too; the context was whole, so both answers count.
    assert cut and not weightless and row["answer_weight"] == 1
    row, cut, weightless = enc({"question": "where is the zebra", "context": context,
                                "answers": []})
    assert not cut and not weightless and row["answer_weight"] == 0   # no answer: not dropped

    short = ft.FeatureEncoder("span", tok, 11, max_query_length=4)  # context cut to 3 pieces
    row, cut, weightless = short({"question": "where is the zebra", "context": context,
                                  "answers": [(start, "big mat")]})
    assert cut and weightless and row["answer_weight"] == 0 and row["start_positions"] == 0


def test_span_rows_ignore_a_tokenizer_files_own_padding_and_truncation(tok):
    """A saved tokenizer.json may pad and truncate every text to a fixed length (MiniLM's: 128).
    The context's pieces and character offsets come from the same tokenizer as everything else,
    which ignores those settings: no [PAD] inside the row, a long context counted as cut."""
    import json
    spec = json.loads(tok.tokenizer_json)
    spec["padding"] = {"strategy": {"Fixed": 12}, "direction": "Right", "pad_to_multiple_of": None,
                       "pad_id": tok.pad_id, "pad_type_id": 0, "pad_token": "[PAD]"}
    spec["truncation"] = {"direction": "Right", "max_length": 12, "strategy": "LongestFirst",
                          "stride": 0}
    fixed = wordpiece.WordPieceTokenizer(json.dumps(spec))
    enc = ft.FeatureEncoder("span", fixed, 32, max_query_length=4)
    context = "the red cat sat on the big mat"
    row, cut, _ = enc({"question": "where is the cat", "context": context,
                       "answers": [(context.index("big mat"), "big mat")]})
    assert row["context_mask"].sum() == 8 and not cut
    assert not ((row["input_ids"] == tok.pad_id) & (row["input_mask"] == 1)).any()
    long = " ".join(["the red cat sat"] * 8) + " on the big mat"          # 36 pieces
    row, cut, weightless = enc({"question": "where", "context": long,
                                "answers": [(long.index("big mat"), "big mat")]})
    assert row["context_mask"].sum() == 32 - 1 - 3 and cut and weightless


def test_multiple_choice_rows(tok):
    enc = ft.FeatureEncoder("multiple_choice", tok, 9, num_choices=3)
    row, cut, _ = enc({"context": "the cat sat", "choices": ["on the mat", "a dog", "red"],
                       "label": 2})
    assert row["input_ids"].shape == (3, 9) and row["label"] == 2 and not cut
    assert row["segment_ids"][1].tolist() == [0] * 5 + [1] * 3 + [0]
    # A cut in any one choice's pair counts the example as truncated (here only the first).
    row, cut, _ = enc({"context": "the cat sat", "choices": ["on the red mat", "a", "red"],
                       "label": 0})
    assert cut and row["input_mask"][0].all() and row["input_mask"][1:, -1].sum() == 0
    with pytest.raises(DataError, match="2 choices"):
        enc({"context": "a", "choices": ["b", "c"], "label": 0})


def test_labels_outside_the_dataset_s_classes_are_refused(tok):
    """-1 (an unlabelled example: TFDS gives HellaSwag's hidden test labels as -1) would wrap to
    the last class in the loss; a label past the last class would make it NaN."""
    encoders = {"classify": (ft.FeatureEncoder("classify", tok, 8, num_labels=3),
                             lambda y: {"text": "the cat", "label": y}),
                "pair_classify": (ft.FeatureEncoder("pair_classify", tok, 8, num_labels=3),
                                  lambda y: {"text_a": "the", "text_b": "cat", "label": y}),
                "tag": (ft.FeatureEncoder("tag", tok, 8, num_labels=3),
                        lambda y: {"words": ["the", "cat"], "tags": [0, y]}),
                "multiple_choice": (ft.FeatureEncoder("multiple_choice", tok, 8, num_choices=3),
                                    lambda y: {"context": "the", "choices": ["a", "b", "c"],
                                               "label": y})}
    for kind, (enc, example) in encoders.items():
        enc(example(2))  # the last class is fine
        for bad in (-1, 3):
            with pytest.raises(DataError, match=rf"{'tag' if kind == 'tag' else 'label'} {bad} "
                               r"is outside \[0, 3\)"):
                enc(example(bad))
    for kind in ft.LABELLED_KINDS:
        with pytest.raises(DataError, match="num_labels >= 2"):
            ft.FeatureEncoder(kind, tok, 8)
    from data.pipelines.finetune_datasets import get_dataset

    swag = get_dataset("swag")
    with pytest.raises(DataError, match="no split 'test'"):
        swag.examples("test", source="tfds")


# ----------------------------------------------------------------------------- batches


def _examples(n):
    rng = np.random.default_rng(0)
    return [{"text": " ".join(rng.choice(WORDS[:12], rng.integers(2, 12))), "label": i % 2}
            for i in range(n)]


def test_train_batches_resume_from_their_state_and_count_truncations(tok):
    examples = _examples(50)
    enc = ft.FeatureEncoder("classify", tok, 8, num_labels=2)
    it = ft.finetune_batches(examples, enc, batch_size=4, train=True, seed=3)
    for _ in range(5):
        next(it)
    state = it.get_state()
    expected = [next(it) for _ in range(20)]  # crosses an epoch boundary
    assert it.stats["examples"] == 100
    truncated = sum(len(tok.encode(e["text"])) > 6 for e in examples) * 2  # two epochs
    assert it.stats["truncated"] == truncated
    again = ft.finetune_batches(examples, enc, batch_size=4, train=True, seed=3)
    again.set_state(state)
    for want in expected:
        got = next(again)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])
    assert again.stats == it.stats


def test_eval_batches_pad_with_mask_and_shard_over_processes(tok):
    examples = _examples(11)
    enc = ft.FeatureEncoder("classify", tok, 8, num_labels=2)
    n = num_batches(11, batch_size=2, process_count=2)
    assert n == 3
    seen = []
    for process in range(2):
        batches = list(ft.finetune_batches(examples, enc, batch_size=2, train=False,
                                           process_index=process, process_count=2))
        assert len(batches) == n
        for batch in batches:
            assert batch["mask"].dtype == np.float32 and batch["input_ids"].shape == (2, 8)
            seen += [row.tolist() for row, m in zip(batch["input_ids"], batch["mask"]) if m]
            assert (batch["input_mask"][batch["mask"] == 0] == 0).all()
    assert len(seen) == 11
    want = [enc(e)[0]["input_ids"].tolist() for e in examples]
    assert sorted(seen) == sorted(want)


def test_eval_padding_rows_carry_no_loss_for_tag_and_span(tok):
    """The mask=0 rows that pad an eval pass to whole global batches are empty for every kind:
    no input, tag labels all -100 with weight 0, span answer weight 0 and no answer. A padding
    row with a loss weight would add a made-up example to the eval loss."""
    kinds = {
        "tag": (ft.FeatureEncoder("tag", tok, 8, num_labels=3),
                {"words": ["the", "cat"], "tags": [1, 2]}),
        "span": (ft.FeatureEncoder("span", tok, 12, max_query_length=3),
                 {"question": "where", "context": "the cat", "answers": [(4, "cat")]}),
        "multiple_choice": (ft.FeatureEncoder("multiple_choice", tok, 8, num_choices=2),
                            {"context": "the", "choices": ["a", "cat"], "label": 1})}
    for kind, (enc, example) in kinds.items():
        batches = list(ft.finetune_batches([example] * 3, enc, batch_size=2, train=False,
                                           process_index=1, process_count=2))
        assert len(batches) == 1
        b = batches[0]
        assert b["mask"].tolist() == [1.0, 0.0], kind             # example 3 and one padding row
        real, pad = {k: v[0] for k, v in b.items()}, {k: v[1] for k, v in b.items()}
        assert real["input_mask"].any() and not pad["input_mask"].any(), kind
        assert (pad["input_ids"] == tok.pad_id).all() and not pad["segment_ids"].any(), kind
        if kind == "tag":
            assert real["label_weights"].sum() == 2
            assert (pad["labels"] == ft.IGNORE).all() and not pad["label_weights"].any()
        elif kind == "span":
            assert real["answer_weight"] == 1 and real["context_mask"].sum() == 2
            assert pad["answer_weight"] == 0 and not pad["context_mask"].any()
            assert (pad["answer_starts"] == -1).all() and (pad["answer_ends"] == -1).all()
            assert pad["start_positions"] == pad["end_positions"] == 0
        else:
            assert real["label"] == 1 and pad["label"] == 0


def test_train_batches_shard_the_global_stream_over_processes(tok):
    """Training over 2 processes: process i yields global batches i, i + 2, ... of the
    single-process stream (same seed), so the two shards are disjoint, cover every example once
    per epoch, and the global batch of a step does not depend on the number of processes."""
    examples = [{"text": " ".join(WORDS[k % 12] for k in range(i, i + 1 + i % 5)), "label": i % 2}
                for i in range(24)]
    enc = ft.FeatureEncoder("classify", tok, 10, num_labels=2)
    it = ft.finetune_batches(examples, enc, batch_size=3, train=True, seed=4)
    single = [next(it) for _ in range(12)]                   # 1.5 epochs of 8 batches
    shards = []
    for i in range(2):
        it = ft.finetune_batches(examples, enc, batch_size=3, train=True, seed=4,
                                 process_index=i, process_count=2)
        shards.append([next(it) for _ in range(6)])
    for step in range(6):
        for i in range(2):
            for key in single[0]:
                np.testing.assert_array_equal(shards[i][step][key], single[2 * step + i][key],
                                              err_msg=key)
    epoch = [row.tolist() for b in single[:8] for row in b["input_ids"]]
    assert sorted(epoch) == sorted(enc(e)[0]["input_ids"].tolist() for e in examples)
    # config.data.batch_size is the global batch: 5 examples fill one of 4 over 2 processes.
    with pytest.raises(DataError, match=r"cannot fill one global batch of 6 \(3 per process x 2 "
                       r"processes\): lower config.data.batch_size \(the global batch\) to at "
                       "most 4, keeping it a multiple of the 2 processes and of the data-par"):
        ft.finetune_batches(examples[:5], enc, batch_size=3, train=True, process_count=2)
    with pytest.raises(DataError, match="at most 5, keeping it a multiple of the data-parallel"):
        ft.finetune_batches(examples[:5], enc, batch_size=6, train=True)
    with pytest.raises(DataError, match="the split is too small for 2 processes"):
        ft.finetune_batches(examples[:1], enc, batch_size=1, train=True, process_count=2)
