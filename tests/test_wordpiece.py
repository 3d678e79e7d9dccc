"""WordPiece vocabularies (data/vocab/wordpiece.py): special tokens, cased and uncased,
deterministic training, the cache, and vocab.txt files (ours and Google's layout)."""

from __future__ import annotations

import pathlib
import pickle

import numpy as np
import pytest

from data.vocab import wordpiece as wp
from data.errors import DataError
from english_documents import DOCS, VOCAB_SIZE


@pytest.fixture(scope="module")
def tok() -> wp.WordPieceTokenizer:
    return wp.train_wordpiece(wp.document_texts(DOCS), vocab_size=VOCAB_SIZE, lowercase=True)


def test_vocab_special_tokens_and_ids(tok):
    assert [tok.id_to_token(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                      "[MASK]"]
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert tok.special_ids == (0, 1, 2, 3, 4)
    assert 100 < tok.vocab_size <= VOCAB_SIZE
    text = "The schoolteacher complained loudly about the unfinished bridge."
    ids = tok.encode(text)
    assert not set(ids) & set(tok.special_ids)          # no [CLS]/[SEP], nothing unknown
    pieces = [tok.id_to_token(i) for i in ids]
    assert any(p.startswith("##") for p in pieces)      # a small vocabulary splits words
    np.testing.assert_array_equal(tok.word_starts(ids), [not p.startswith("##") for p in pieces])
    assert tok.decode(ids) == "the schoolteacher complained loudly about the unfinished bridge."
    assert tok.encode_batch([text, "after dinner"]) == [ids, tok.encode("after dinner")]
    assert pickle.loads(pickle.dumps(tok)).encode(text) == ids
    # Every character seen in training has both forms, so no known letter makes a word [UNK].
    assert tok.encode("Zygote") != [tok.unk_id] and tok.token_to_id("##z") is not None


def test_cased_and_uncased():
    texts = [*wp.document_texts(DOCS[:40]), "Élise and Zoë met the Bennets at the café."]
    uncased = wp.train_wordpiece(texts, vocab_size=300, lowercase=True)
    cased = wp.train_wordpiece(texts, vocab_size=300, lowercase=False)
    assert uncased.lowercase and not cased.lowercase
    assert uncased.encode("Élise BENNET") == uncased.encode("elise bennet")   # lower, no accents
    assert cased.encode("Bennet") != cased.encode("bennet")
    assert "É" in "".join(cased.id_to_token(i) for i in cased.encode("Élise"))
    assert all(t == t.lower() for t in map(uncased.id_to_token, range(5, uncased.vocab_size)))
    assert any(t != t.lower() for t in map(cased.id_to_token, range(5, cased.vocab_size)))


def test_training_is_deterministic():
    # HF's WordPieceTrainer is not (tokenizers#1794); ours must give byte-identical files.
    texts = list(wp.document_texts(DOCS[:60]))
    first = wp.train_wordpiece(texts, vocab_size=400, lowercase=True)
    for _ in range(3):
        assert wp.train_wordpiece(texts, vocab_size=400, lowercase=True).tokenizer_json == (
            first.tokenizer_json)


def test_vocab_cache_reuse_name_and_corrupt_file(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    calls = []

    def documents():
        calls.append(1)
        return DOCS[:40]

    kwargs = dict(datasets=("brown", "austen"), split="train", vocab_size=300, lowercase=True,
                  verbose=False)
    first = wp.vocab_for_documents(documents, **kwargs)
    path = wp.cache_path(("brown", "austen"), "train", vocab_size=300, lowercase=True)
    assert path.parent == tmp_path / "vocab" and path.is_file()
    assert path.name == "brown+austen.train.wordpiece.v300.uncased.wp1.json"
    assert first.path == path
    again = wp.vocab_for_documents(lambda: pytest.fail("must not train again"), **kwargs)
    assert again.tokenizer_json == first.tokenizer_json and len(calls) == 1
    cased = wp.vocab_for_documents(documents, **{**kwargs, "lowercase": False})
    assert cased.path.name == "brown+austen.train.wordpiece.v300.cased.wp1.json"
    assert wp.load_tokenizer(path).encode("The governor") == first.encode("The governor")
    assert not list(path.parent.glob("*.partial"))     # the temporary file was renamed
    assert wp.load_tokenizer(path, lowercase=True).lowercase  # the file's casing, as asked
    with pytest.raises(DataError, match="is an uncased tokenizer.*lowercase=False was asked"):
        wp.load_tokenizer(path, lowercase=False)  # not silently trained uncased

    # A file that loads but does not match its name (here: cased under an uncased name).
    path.write_text(cased.tokenizer_json)
    with pytest.raises(DataError, match="lowercase=False.*not ours"):
        wp.vocab_for_documents(documents, **kwargs)
    path.write_text('{"version": "1.0", "model": {"type": "WordPie')
    with pytest.raises(DataError, match="corrupt.*delete"):
        wp.vocab_for_documents(documents, **kwargs)
    with pytest.raises(DataError, match="does not exist"):
        wp.load_tokenizer(tmp_path / "missing.json")


SPAM_EMAILS = pathlib.Path(__file__).parent / "fixtures" / "spam" / "package" / "data"


def _spam_texts() -> list[str]:
    from data.corpora import spam

    return [e.text for e in spam.read_emails(SPAM_EMAILS)]


def test_a_vocab_size_below_the_alphabet_gives_the_alphabet(tmp_path, capsys):
    """Emails use many characters (the real spam corpus 1,549, so 3,103 tokens with both forms
    and the specials): a smaller vocab_size gets exactly those, and says so. The cache took
    its own fresh file for corrupt (more tokens than its name's size) and left it there."""
    texts = _spam_texts()
    alphabet = {c for word in wp.word_counts(texts, lowercase=True) for c in word}
    smallest = len(wp.SPECIAL_TOKENS) + 2 * len(alphabet)
    kwargs = dict(split="train", vocab_size=100, lowercase=True, cache_dir=tmp_path)
    assert smallest > 100
    tok = wp.load_or_train("spam", texts_fn=lambda: texts, **kwargs)
    assert tok.vocab_size == wp.minimum_size(tok) == smallest
    assert set(tok.tokens[5:]) == alphabet | {"##" + c for c in alphabet}  # characters only
    assert f"vocab_size=100 is below the {smallest} tokens" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == [tok.path.name]  # no lock file left
    again = wp.load_or_train("spam", texts_fn=lambda: pytest.fail("must not train again"),
                             **kwargs)
    assert again.tokens == tok.tokens
    assert "vocab_size=100 is below" in capsys.readouterr().out  # said at every run
    # Above the alphabet, merges fill the vocabulary as asked.
    larger = wp.load_or_train("spam", texts_fn=lambda: texts,
                              **{**kwargs, "vocab_size": smallest + 50})
    assert larger.vocab_size == smallest + 50 and wp.minimum_size(larger) == smallest
    assert "is below" not in capsys.readouterr().out


def test_a_trained_vocabulary_failing_the_cache_check_is_a_bug_not_a_corrupt_file(
        tmp_path, monkeypatch):
    """A file the run itself just trained is never reported as corrupt (with advice to delete
    it): a vocabulary that fails the cache's check is a bug here, and is not written."""
    train = wp.train_wordpiece

    def cased_instead(texts, *, vocab_size, lowercase, **kwargs):  # a bug: the other casing
        return train(texts, vocab_size=vocab_size, lowercase=not lowercase, **kwargs)

    monkeypatch.setattr(wp, "train_wordpiece", cased_instead)
    with pytest.raises(RuntimeError, match="lowercase=False.*a bug in data/vocab/wordpiece.py"):
        wp.load_or_train("brown", "train", lambda: wp.document_texts(DOCS[:10]),
                         vocab_size=200, lowercase=True, cache_dir=tmp_path, verbose=False)
    assert list(tmp_path.iterdir()) == []


def test_vocab_txt_loading(tok, tmp_path):
    saved = tmp_path / "vocab.txt"
    tok.save_vocab_txt(saved)
    loaded = wp.load_vocab_txt(saved, lowercase=True)
    text = "In truth, Colonel Brandon hurried past the deserted schoolhouse."
    assert loaded.encode(text) == tok.encode(text) and loaded.vocab_size == tok.vocab_size

    # Google's layout: [PAD] 0, [unused*], [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103.
    google = (["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]",
              "[MASK]"] + ["the", "bridge", "un", "##finished", "."])
    (tmp_path / "google.txt").write_text("\n".join(google) + "\n")
    g = wp.load_tokenizer(tmp_path / "google.txt", lowercase=True)
    assert (g.pad_id, g.unk_id, g.cls_id, g.sep_id, g.mask_id) == (0, 100, 101, 102, 103)
    assert g.encode("The unfinished bridge.") == [104, 106, 107, 105, 108]
    assert g.encode("The Zebra") == [104, 100]
    assert list(g.word_starts([106, 107])) == [True, False]

    (tmp_path / "nomask.txt").write_text("\n".join(google[:103]) + "\n")
    with pytest.raises(DataError, match=r"lacks the special tokens \['\[MASK\]'\]"):
        wp.load_vocab_txt(tmp_path / "nomask.txt", lowercase=True)
    (tmp_path / "twice.txt").write_text("\n".join(google + ["bridge"]) + "\n")
    with pytest.raises(DataError, match=r"\['bridge'\] appear more than once"):
        wp.load_vocab_txt(tmp_path / "twice.txt", lowercase=True)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DataError, match="corrupt"):
        wp.load_vocab_txt(tmp_path / "empty.txt", lowercase=True)
    with pytest.raises(DataError, match="absent.txt is missing, unreadable"):
        wp.load_vocab_txt(tmp_path / "absent.txt", lowercase=True)
    with pytest.raises(DataError, match="no token with a capital letter .*pass lowercase=True"):
        wp.load_vocab_txt(tmp_path / "google.txt", lowercase=False)  # all its words [UNK]
    # Line separators that are not \n are tokens (bert-base-chinese has U+2028), and a file
    # written with \r\n reads the same: every id as its line
    odd = google + ["\u2028", "\x85", "\x1c", "zebra"]
    (tmp_path / "odd.txt").write_bytes(("\r\n".join(odd) + "\r\n").encode("utf-8"))
    read = wp.load_vocab_txt(tmp_path / "odd.txt", lowercase=True)
    assert read.vocab_size == len(odd) and read.encode("zebra") == [len(odd) - 1]
    (tmp_path / "cased.txt").write_text("\n".join(google + ["Zebra"]) + "\n")
    assert wp.load_vocab_txt(tmp_path / "cased.txt", lowercase=False).encode("Zebra") == [109]
    with pytest.raises(DataError, match="casing"):
        wp.load_tokenizer(saved)


def reference_wordpiece(word: str, vocab: dict[str, int], unk: int) -> list[int]:
    """BERT's WordpieceTokenizer on one word, in plain Python: greedy longest match first from
    the left, '##' on every piece after the first; [UNK] for the whole word when some position
    has no piece, or when the word has more than 100 characters."""
    if len(word) > 100:
        return [unk]
    ids, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = ("##" if start else "") + word[start:end]
            if piece in vocab:
                ids.append(vocab[piece])
                start = end
                break
        else:
            return [unk]
    return ids


def test_greedy_longest_match_unknown_and_long_words():
    """Encoding with a hand-made vocabulary equals BERT's algorithm (reference above): the
    longest piece wins even where a shorter first piece would also cover the word ('unaff' +
    '##able', not 'un' + '##affable'), a word with an uncoverable rest is one [UNK] (not its
    covered prefix), a word of exactly 100 characters is split while 101 characters give [UNK],
    and a special token written in the text stays one token."""
    tokens = [*wp.SPECIAL_TOKENS, "un", "unaff", "##affable", "##able", "##a", "##b", "ab",
              "##ab", "the", "bridge", "##s", ".", "a"]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = wp.from_vocab(vocab, lowercase=True)
    words = ["unaffable", "unable", "una", "unb", "unabab", "unx", "bridges", "ab" * 50,
             "ab" * 50 + "a", "a" * 100, "a" * 101, "abba", "the", "thebridge"]
    for word in words:
        assert tok.encode(word) == reference_wordpiece(word, vocab, tok.unk_id), word
    assert tok.encode("unaffable") == [vocab["unaff"], vocab["##able"]]
    assert tok.encode("ab" * 50) == [vocab["ab"]] + [vocab["##ab"]] * 49
    assert tok.encode("ab" * 50 + "a") == [tok.unk_id]
    assert tok.encode("The unx bridges.") == [vocab["the"], tok.unk_id, vocab["bridge"],
                                              vocab["##s"], vocab["."]]
    assert tok.encode("the [MASK] bridge [SEP]") == [vocab["the"], tok.mask_id, vocab["bridge"],
                                                     tok.sep_id]
    np.testing.assert_array_equal(tok.word_starts(tok.encode("unaffable bridges")),
                                  [True, False, True, False])


def test_max_characters_keeps_the_most_frequent_and_their_words(tmp_path, capsys):
    """The spam emails' characters (97 in the fixture's) limited to 40: the 40 most frequent
    (ties to the lower code point, counted here by hand), each in both forms; a word with any other
    character is [UNK] and is left out of the training, and the note counts those words. Its
    own cache file; 0 keeps every character; a bad limit is refused."""
    texts = _spam_texts()
    counts = wp.word_counts(texts, lowercase=True)
    counts.pop("", None)
    frequency = {}
    for word, n in counts.items():
        for c in word:
            frequency[c] = frequency.get(c, 0) + n
    ranked = sorted(frequency.items(), key=lambda item: (-item[1], ord(item[0])))
    kept = {c for c, _ in ranked[:40]}
    assert len(frequency) > 40
    tok = wp.load_or_train("spam", "train", lambda: texts, vocab_size=3000, lowercase=True,
                           cache_dir=tmp_path, max_characters=40)
    single = {t for t in tok.tokens[5:] if len(t) == 1 or (t.startswith("##") and len(t) == 3)}
    assert single == kept | {"##" + c for c in kept}
    assert all(set(t.removeprefix("##")) <= kept for t in tok.tokens[5:])
    rare = next(w for w in counts if not set(w) <= kept and len(w) > 1)
    assert [tok.id_to_token(i) for i in tok.encode(f"the {rare}")] == ["the", "[UNK]"]
    lost = sum(n for w, n in counts.items() if not set(w) <= kept)
    assert (f"kept the 40 most frequent of the texts' {len(frequency)} characters: the words "
            f"with the other {len(frequency) - 40} become [UNK], {lost:,} of "
            f"{sum(counts.values()):,} words") in capsys.readouterr().out
    assert tok.path.name.endswith(".v3000.uncased.c40.wp1.json")
    unlimited = wp.train_wordpiece(texts, vocab_size=3000, lowercase=True, max_characters=0)
    assert wp.minimum_size(unlimited) == len(wp.SPECIAL_TOKENS) + 2 * len(frequency)
    for bad in (-1, 2.5, True):
        with pytest.raises(DataError, match="max_characters"):
            wp.train_wordpiece(texts, vocab_size=3000, lowercase=True, max_characters=bad)
