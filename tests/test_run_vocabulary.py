"""A run keeps its vocabulary in its workdir (train/vocabulary.py): saved at the first start,
used at every later one and by fine-tuning from the workdir, whatever the cache holds by then;
the config cannot ask for another one; corrupt files are named."""

from __future__ import annotations

import hashlib
import json
import shutil

import ml_collections
import pytest

from data.vocab import sentencepiece as sv
from data.vocab import wordpiece
from data.errors import DataError
from en_es_pairs import VOCAB, texts_fn
from train import vocabulary
from train.config import ConfigError, apply_override, load_config_file

WORDS = ["the", "cat", "sat", "on", "mat", "##s", "dog", "ran"]


def _wordpiece(words=WORDS, *, lowercase=True):
    vocab = {t: i for i, t in enumerate(list(wordpiece.SPECIAL_TOKENS) + list(words))}
    return wordpiece.from_vocab(vocab, lowercase=lowercase)


KEYS = ("data.vocab_size", "data.lowercase")


def _config(vocab_size=400, lowercase=True):
    config = ml_collections.ConfigDict({"data": {"vocab_size": vocab_size, "lowercase": lowercase,
                                                 "name": "x"}})
    return vocabulary.settings_of(config, KEYS)


@pytest.fixture(scope="module")
def spm_tokenizer(tmp_path_factory):
    return sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB,
                            cache_dir=tmp_path_factory.mktemp("vocab"), verbose=False)


def test_saved_vocabularies_read_back_the_same(tmp_path, spm_tokenizer):
    assert vocabulary.load(tmp_path) is None  # a new workdir
    tok = _wordpiece()
    path = vocabulary.save(tmp_path / "wp", tok, _config())
    assert path == tmp_path / "wp" / "vocabulary" / "tokenizer.json"
    loaded = vocabulary.load(tmp_path / "wp")
    assert loaded.tokens == tok.tokens and vocabulary.same(loaded, tok)
    assert vocabulary.fingerprint(loaded) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert json.loads((path.parent / "settings.json").read_text()) == {
        "data.vocab_size": 400, "data.lowercase": True}

    path = vocabulary.save(tmp_path / "sp", spm_tokenizer, _config(VOCAB))
    assert path.name == "sentencepiece.model"
    loaded = vocabulary.load(tmp_path / "sp")
    assert loaded.model_proto == spm_tokenizer.model_proto
    assert loaded.encode("Where is the train station?") == spm_tokenizer.encode(
        "Where is the train station?")


def test_same_compares_tokens_and_casing_not_the_file(tmp_path):
    tok = _wordpiece()
    tok.save_vocab_txt(tmp_path / "vocab.txt")
    assert vocabulary.same(wordpiece.load_tokenizer(tmp_path / "vocab.txt", lowercase=True), tok)
    swapped = WORDS[:]
    swapped[1], swapped[6] = swapped[6], swapped[1]  # 'cat' and 'dog' trade ids
    assert not vocabulary.same(_wordpiece(swapped), tok)
    assert not vocabulary.same(_wordpiece(lowercase=False), tok)


def test_choose_builds_only_without_a_saved_vocabulary_and_refuses_conflicts(spm_tokenizer):
    tok = _wordpiece()
    built = []
    assert vocabulary.choose(None, lambda: built.append(1) or tok, kind="wordpiece") is tok
    assert built == [1]
    assert vocabulary.choose(tok, lambda: built.append(2), kind="wordpiece") is tok
    assert built == [1]  # the saved one is used: nothing built, no cache read
    assert vocabulary.choose(tok, lambda: None, kind="wordpiece", requested=_wordpiece(),
                             where="config.data.vocab_file='v.txt'") is tok
    with pytest.raises(ConfigError, match=r"config.data.vocab_file='v.txt' is not the vocabulary "
                                          r"this run started with.*new --workdir"):
        vocabulary.choose(tok, lambda: None, kind="wordpiece", requested=_wordpiece(WORDS[:-1]),
                          where="config.data.vocab_file='v.txt'")
    with pytest.raises(ConfigError, match="is sentencepiece, but this task uses wordpiece"):
        vocabulary.choose(spm_tokenizer, lambda: None, kind="wordpiece")


def test_other_settings_and_damaged_files_are_refused(tmp_path, spm_tokenizer):
    vocabulary.save(tmp_path, _wordpiece(), _config())
    with pytest.raises(ConfigError, match=r"config.data.vocab_size=500, the vocabulary's 400.*"
                                          r"new --workdir"):
        vocabulary.check_settings(tmp_path, _config(vocab_size=500))
    with pytest.raises(ConfigError, match="config.data.lowercase=False"):
        vocabulary.check_settings(tmp_path, _config(lowercase=False))
    vocabulary.check_settings(tmp_path, _config())

    folder = tmp_path / "vocabulary"
    (folder / "settings.json").write_text("[1")
    with pytest.raises(DataError, match=r"settings.json is missing or corrupt.*restore it"):
        vocabulary.check_settings(tmp_path, _config())
    (folder / "tokenizer.json").write_text('{"model": ')
    with pytest.raises(DataError, match=r"tokenizer.json is corrupt.*restore it from a copy"):
        vocabulary.load(tmp_path)
    (folder / "tokenizer.json").unlink()

    vocabulary.save(tmp_path, spm_tokenizer, _config())
    (folder / "sentencepiece.model").write_bytes(b"\x00not a model")
    with pytest.raises(DataError, match=r"sentencepiece.model is corrupt.*new --workdir"):
        vocabulary.load(tmp_path)
    vocabulary.save(tmp_path, _wordpiece(), _config())
    with pytest.raises(DataError, match="holds both tokenizer.json and sentencepiece.model"):
        vocabulary.load(tmp_path)


def test_tasks_use_the_saved_vocabulary_of_their_kind(bible_env, spm_tokenizer):
    from train.tasks.classify import ClassificationTask
    from train.tasks.translate import TranslationTask

    config = load_config_file("configs/transformer/translate.py:smoke")
    task = TranslationTask(config, spm_tokenizer)
    assert task.tokenizer is spm_tokenizer
    assert task.model_config.vocab_size == spm_tokenizer.vocab_size
    with pytest.raises(ConfigError, match="is wordpiece, but this task uses sentencepiece"):
        TranslationTask(config, _wordpiece())
    with pytest.raises(ConfigError, match="used by a text task, not image classification"):
        ClassificationTask(load_config_file("configs/vit/fashion_mnist.py:smoke"), spm_tokenizer)


def _swap_two_tokens(path):
    """Rewrites the cached WordPiece vocabulary at `path` with two ordinary tokens trading ids:
    the same size and casing, every other id the same (what a retrained cache can look like)."""
    tok = wordpiece.load_tokenizer(path)
    tokens = list(tok.tokens)
    tokens[10], tokens[11] = tokens[11], tokens[10]
    swapped = wordpiece.from_vocab({t: i for i, t in enumerate(tokens)}, lowercase=tok.lowercase)
    path.write_text(swapped.tokenizer_json)
    return tok


def test_a_resumed_run_and_fine_tuning_keep_the_run_s_vocabulary(brown_data_root, tmp_path,
                                                                 monkeypatch):
    from train.finetune_init import resolve_init
    from train.trainer import Trainer

    root = tmp_path / "data_root"  # a copy: the cache is rewritten below
    shutil.copytree(brown_data_root, root)
    monkeypatch.setenv("PAPERS_JAX_DATA", str(root))
    config = load_config_file("configs/bert/pretrain.py:smoke")
    for key, value in {"data.names": "('brown',)", "train.num_steps": "8",
                       "train.eval_every": "0", "train.checkpoint_every": "2"}.items():
        apply_override(config, key, value)
    workdir = tmp_path / "run"
    trainer = Trainer(config, workdir)
    trainer.run(until_step=4)
    saved = workdir / "vocabulary" / "tokenizer.json"
    cache = wordpiece.cache_path(("brown",), "train", vocab_size=config.data.vocab_size,
                                 lowercase=True)
    assert saved.read_bytes() == cache.read_bytes()

    original = _swap_two_tokens(cache)
    resumed = Trainer(config, workdir)
    assert resumed.task.tokenizer.tokens == original.tokens  # not the swapped cache
    resumed.run()
    assert saved.read_bytes() != cache.read_bytes()  # the saved file was left as it was
    assert wordpiece.load_tokenizer(saved).tokens == original.tokens
    # Only damaged checkpoints set aside: a fresh start keeps the vocabulary they were made with.
    aside = tmp_path / "aside"
    shutil.copytree(workdir / "vocabulary", aside / "vocabulary")
    (aside / "checkpoints" / "8.corrupt-1790000000").mkdir(parents=True)
    assert Trainer(config, aside, fresh_start=True).task.tokenizer.tokens == original.tokens

    finetune = load_config_file("configs/bert/finetune.py:smoke")
    for key, value in {"data.name": "brown_genre", "init": str(workdir)}.items():
        apply_override(finetune, key, value)
    assert resolve_init(finetune, scratch_vocab=None).tokenizer.tokens == original.tokens
    # A Wikipedia stream's run without its vocabulary/: named, not retrained from local files
    streamed = tmp_path / "streamed"
    streamed.mkdir()
    (streamed / "config.json").write_text(json.dumps(
        {**json.loads((workdir / "config.json").read_text()),
         "data": {**json.loads((workdir / "config.json").read_text())["data"],
                  "source": "tfds", "names": ["wikipedia/20230601.en"]}}))
    from_stream = load_config_file("configs/bert/finetune.py:smoke")
    for key, value in {"data.name": "brown_genre", "init": str(streamed)}.items():
        apply_override(from_stream, key, value)
    with pytest.raises(ConfigError, match="holds no vocabulary/: its run trained one on a sample"):
        resolve_init(from_stream, scratch_vocab=None)

    apply_override(config, "data.vocab_size", str(config.data.vocab_size + 100))
    with pytest.raises(ConfigError, match=r"config.data.vocab_size=\d+, the vocabulary's"):
        Trainer(config, workdir)
    # A workdir of another task: the task's own message, not a list of absent settings (its
    # data is there: a run without it stops earlier, data/fetched.py).
    from data.testing import install_fashion_mnist_fixture

    install_fashion_mnist_fixture(root)
    with pytest.raises(ConfigError, match="used by a text task, not image classification"):
        Trainer(load_config_file("configs/vit/fashion_mnist.py:smoke"), workdir)
    # Only what decided the vocabulary is recorded: fine-tuning from the workdir has none.
    from train.tasks.finetune import FinetuneTask

    assert FinetuneTask(finetune).vocabulary_settings == ()
    assert vocabulary.load(workdir).tokens == original.tokens

    # Before the first checkpoint nothing is bound to the vocabulary: it is built again.
    fresh = tmp_path / "fresh"
    shutil.copytree(workdir / "vocabulary", fresh / "vocabulary")
    assert Trainer(config, fresh).saved_vocabulary is None


def test_a_vocab_size_beside_a_vocab_file_of_another_size_is_said_unused(brown_data_root,
                                                                         tmp_path, monkeypatch):
    """data.vocab_size sizes a vocabulary trained on the texts; beside a data.vocab_file of
    another size the run says it is not used (pretraining, and fine-tuning from scratch)."""
    from train.finetune_init import resolve_init
    from train.tasks.bert_pretrain import BertPretrainingTask

    monkeypatch.setenv("PAPERS_JAX_DATA", str(brown_data_root))
    file = tmp_path / "tokenizer.json"
    file.write_text(_wordpiece().tokenizer_json)
    size = _wordpiece().vocab_size
    unused = "config.data.vocab_size=400 is not used: the vocabulary is config.data.vocab_file's"
    pretrain = load_config_file("configs/bert/pretrain.py:smoke")
    finetune = load_config_file("configs/bert/finetune.py:smoke")
    for config, key in ((pretrain, "names"), (finetune, "name")):
        apply_override(config, f"data.{key}", "('brown',)" if key == "names" else "brown_genre")
        apply_override(config, "data.vocab_file", str(file))
    apply_override(finetune, "init", "scratch")
    assert pretrain.data.vocab_size == finetune.data.vocab_size == 400
    notes = BertPretrainingTask(pretrain).resolution().notes
    assert len(notes) == 1 and notes[0].startswith(unused) and f"({size} tokens)" in notes[0]
    assert unused in resolve_init(finetune, scratch_vocab=None).description
    for config in (pretrain, finetune):  # the file's own size: nothing to say
        apply_override(config, "data.vocab_size", str(size))
    assert BertPretrainingTask(pretrain).resolution().notes == ()
    assert "vocab_size" not in resolve_init(finetune, scratch_vocab=None).description
