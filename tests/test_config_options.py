"""Config keys that must change what a run does ("an option accepted but ignored is a defect"):
each test sets one key through the config, both ways where it has two, and checks an effect
observed outside the code that reads it.

  data.vocab_model_type    translation: the trained SentencePiece model's own trainer_spec
  data.text_key            causal LM and its Kneser-Ney baseline: the field the vocabulary,
                           training and eval text come from
  model.use_bias           decoder LM: bias parameters of the attention and feed-forward
                           projections
  data.vocab_sample_documents  BERT on a TFDS Wikipedia stream: the articles the WordPiece
                           vocabulary is trained on
  train.async_checkpoint   the trainer's orbax checkpoint manager saves in the background or not
  task.num_samples         translation: sample translations written to the log at a BLEU eval
  data.worker_count        image, translation and BERT Wikipedia tasks: the training pipeline's
                           worker processes (refused on the local BERT corpora)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.traverse_util import flatten_dict
from sentencepiece import sentencepiece_model_pb2

from data.builders.examples import as_text
from data.errors import DataError
from train.config import apply_override, load_config_file


def _config(spec: str, **overrides):
    config = load_config_file(spec)
    for key, value in overrides.items():
        apply_override(config, key, str(value))
    return config


def _translate_config(**overrides):
    return _config("configs/transformer/translate.py:smoke", **overrides)


# ---------------------------------------------------------------- data.vocab_model_type


@pytest.mark.parametrize("model_type, expected", [
    ("unigram", sentencepiece_model_pb2.TrainerSpec.UNIGRAM),
    ("bpe", sentencepiece_model_pb2.TrainerSpec.BPE)])
def test_vocab_model_type_chooses_the_sentencepiece_algorithm(bible_env, model_type, expected):
    """The translation task's vocabulary is a SentencePiece model of the configured type, as
    the serialized model records it (trainer_spec.model_type), not as a file name says."""
    from train.tasks.translate import TranslationTask

    task = TranslationTask(_translate_config(**{"data.vocab_model_type": model_type}))
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(task.tokenizer.model_proto)
    assert proto.trainer_spec.model_type == expected
    # The pieces differ as the two algorithms do: BPE scores its pieces by merge rank (0, -1,
    # -2, ... in order), unigram by their log-probabilities (not whole numbers).
    scores = [p.score for p in proto.pieces
              if p.type == sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL]
    ranks = [-float(i) for i in range(len(scores))]
    assert (scores == ranks) == (model_type == "bpe")


# ---------------------------------------------------------------------------- task.num_samples


@pytest.mark.parametrize("num_samples", [0, 2, 5])
def test_num_samples_logs_that_many_sample_translations(bible_env, num_samples):
    """score_predictions logs task.num_samples translations (fewer only when fewer were
    decoded), each with its source, reference and output."""
    from train.tasks.translate import TranslationTask

    task = TranslationTask(_translate_config(**{"task.num_samples": num_samples}))
    source = task._source(task.config.data.eval_split)
    decoded = 3
    tokens = np.zeros((4, 40), np.int32)
    for row in range(decoded):  # each "translation" is the reference's own tokens
        ids = task.tokenizer.encode(source[row]["es"])[:39] + [task.tokenizer.eos_id]
        tokens[row, :len(ids)] = ids
    outputs = [{"tokens": tokens, "index": np.arange(4), "mask": np.array([1, 1, 1, 0])}]
    lines = []
    task.score_predictions(outputs, lines.append)
    assert len(lines) == min(num_samples, decoded)
    for i, line in enumerate(lines):
        assert line.startswith(f"sample {i}:")
        assert as_text(source[i]["en"]) in line and as_text(source[i]["es"]) in line


# ------------------------------------------------------------------------------ data.text_key

WORDS = {"body": "quokka wombat platypus echidna dingo wallaby numbat",
         "text": "tractor harvest barley silo plough combine orchard"}


def _documents(fields, n, offset=0):
    """`n` documents with the given fields, each sentences of that field's words."""
    rng = np.random.default_rng(offset)
    return [{field: " ".join(" ".join(rng.choice(WORDS[field].split(), 5)) + "."
                             for _ in range(8)) for field in fields} for _ in range(n)]


@pytest.fixture
def lm_sources(monkeypatch, tmp_path):
    """english_lm's splits replaced by in-memory documents (12 train, 3 eval) with the fields
    `made["fields"]`, and the vocabulary cache in tmp_path."""
    from data.builders import sources

    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    made = {"fields": ("body", "text")}

    def get_data_source(name, split, source="local"):
        assert name == "english_lm"
        return _documents(made["fields"], 12 if split == "train" else 3,
                          offset=0 if split == "train" else 100)

    monkeypatch.setattr(sources, "get_data_source", get_data_source)
    return made


def _lm_task(saved_vocabulary=None, **overrides):
    from train.tasks.causal_lm import CausalLMTask

    config = _config("configs/lm/english.py:smoke", **{"task.eval_tokens": 0, **overrides})
    return CausalLMTask(config, saved_vocabulary)


def test_text_key_names_the_field_of_the_text(lm_sources):
    """data.text_key='body': the vocabulary is trained on, and the training and eval rows hold,
    the 'body' field; the examples' 'text' field (other words) is never read."""
    task = _lm_task(**{"data.text_key": "body"})
    tok = task.tokenizer
    vocabulary = " ".join(tok.tokens)
    assert all(word in vocabulary for word in WORDS["body"].split())   # whole-word tokens
    assert not any(word in vocabulary for word in WORDS["text"].split())

    batch = next(task.train_iterator(batch_size=4, seed=0, process_index=0, process_count=1))
    read = " ".join(tok.decode(row.tolist()) for row in batch["tokens"])
    assert set(read.replace(".", " ").split()) <= set(WORDS["body"].split())

    expected = [i for example in _documents(("body", "text"), 3, offset=100)
                for i in tok.encode(example["body"])]  # the eval documents' text tokens
    rows = task.eval_rows()[0]
    scored = rows["targets"][rows["weights"] > 0]
    np.testing.assert_array_equal(scored[scored != tok.eos_id], expected)

    # each field its own cached vocabulary: the default 'text' trains one of its own words, and
    # --print_config's look-up (nothing trained) finds each
    from train.tasks.causal_lm import _cached_vocabulary
    other = _lm_task().tokenizer
    assert all(word in " ".join(other.tokens) for word in WORDS["text"].split())
    for key, want in (("body", tok), ("text", other)):
        config = _config("configs/lm/english.py:smoke", **{"data.text_key": key})
        assert _cached_vocabulary(config, None).tokenizer_json == want.tokenizer_json


def test_default_text_key_on_documents_without_it_fails_naming_the_field(lm_sources):
    """Documents whose text lives under 'body' and the default data.text_key='text': the
    pipeline stops with a DataError naming the missing field and the fields there are."""
    lm_sources["fields"] = ("body",)
    vocabulary = _lm_task(**{"data.text_key": "body"}).tokenizer
    task = _lm_task(saved_vocabulary=vocabulary)
    assert task.config.data.text_key == "text"
    with pytest.raises(DataError, match=r"no field 'text' \(fields: \['body'\]\)"):
        task.train_iterator(batch_size=4, seed=0, process_index=0, process_count=1)


def test_a_vocabulary_to_train_on_a_missing_text_key_fails_naming_the_field(lm_sources):
    """Before any vocabulary exists, the BPE trainer meets the missing field first: the same
    DataError, with the key to set."""
    lm_sources["fields"] = ("body",)
    with pytest.raises(DataError, match=r"no field 'text' \(fields: \['body'\]\): set the "
                                        r"config's data.text_key"):
        _lm_task()


def test_text_key_is_the_field_the_kneser_ney_baseline_reads(lm_sources):
    """The Kneser-Ney baseline (python -m train.kneser_ney) of a config with data.text_key='body'
    trains its vocabulary on, and scores, the 'body' texts: every byte of the eval documents'
    'body' fields is scored (a byte-level BPE keeps the bytes; EOS has none), in as many
    tokens as a vocabulary of the 'body' texts makes of them."""
    from data.vocab import bpe
    from train import kneser_ney

    config = _config("configs/lm/english.py:smoke", **{"data.text_key": "body",
                                                       "task.eval_tokens": 0})
    # fixed discounts: these texts are too even to estimate them from counts of counts
    result = kneser_ney.evaluate(config, order=2, discounts=(0.5, 0.5, 0.5))
    train_docs = _documents(("body", "text"), 12)
    eval_docs = _documents(("body", "text"), 3, offset=100)
    assert result["bytes"] == sum(len(d["body"].encode()) for d in eval_docs)
    # a vocabulary trained here on the 'body' texts: each document's tokens and its end scored
    tok = bpe.train_bpe((d["body"] for d in train_docs), vocab_size=config.data.vocab_size)
    assert result["tokens"] == sum(len(tok.encode(d["body"])) + 1 for d in eval_docs)


# ------------------------------------------------------------------------------ model.use_bias

PROJECTIONS = ("attention/query", "attention/key", "attention/value", "attention/out",
               "mlp/wi", "mlp/wo")


@pytest.mark.parametrize("use_bias", [True, False])
def test_use_bias_adds_or_removes_the_projection_biases(use_bias):
    """model.use_bias governs the bias of every attention and feed-forward projection of the
    decoder LM; the layer norms keep theirs either way."""
    from flax import linen as nn

    from models.decoder_lm import DecoderLM
    from train.tasks.causal_lm import _model_config

    config = _config("configs/lm/english.py:smoke", **{"model.use_bias": use_bias})
    model_config = _model_config(config, vocab_size=50)
    shapes = jax.eval_shape(lambda: DecoderLM(model_config).init(
        jax.random.PRNGKey(0), jnp.ones((1, 8), jnp.int32)))
    names = {"/".join(path) for path in flatten_dict(nn.meta.unbox(shapes["params"]))}
    blocks = [f"block_{i}" for i in range(config.model.num_layers)]
    kernels = {f"{b}/{p}/kernel" for b in blocks for p in PROJECTIONS}
    biases = {f"{b}/{p}/bias" for b in blocks for p in PROJECTIONS}
    norm_biases = {f"{b}/{n}/bias" for b in blocks for n in ("norm_attention", "norm_mlp")}
    assert kernels <= names and norm_biases | {"norm/bias"} <= names
    assert (biases & names) == (biases if use_bias else set())


# --------------------------------------------------------------- data.vocab_sample_documents


class _Articles:
    """A Wikipedia-like TFDS source of `n` articles (tests/tfds_mock.py's prose) that records
    the index of every article read."""

    def __init__(self, n):
        from tfds_mock import prose

        self.texts = [prose(np.random.default_rng(i)) for i in range(n)]
        self.read: list[int] = []

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        self.read.append(int(i))
        return {"title": f"Article {i}", "text": self.texts[i]}

    def __getitems__(self, indices):
        return [self[i] for i in indices]


@pytest.mark.parametrize("count", [1, 7])
def test_vocab_sample_documents_is_how_many_articles_train_the_wordpiece(monkeypatch, tmp_path,
                                                                         count):
    """BERT on a TFDS Wikipedia stream trains its WordPiece vocabulary on exactly
    data.vocab_sample_documents articles of the training split, spread over it (the first and
    the last among them), each read once; nothing else is read to build the task."""
    from data.builders import sources
    from train.tasks.bert_pretrain import BertPretrainingTask

    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    opened = {}

    def get_data_source(name, split, source="local"):
        assert source == "tfds" and name.startswith("wikipedia/")
        return opened.setdefault(split, _Articles(40))

    monkeypatch.setattr(sources, "get_data_source", get_data_source)
    config = _config("configs/bert/pretrain.py:smoke,data=wikipedia",
                     **{"data.vocab_sample_documents": count})
    BertPretrainingTask(config)  # trains the vocabulary (into tmp_path)
    assert list(opened) == [config.data.train_split]
    read = opened[config.data.train_split].read
    assert len(read) == len(set(read)) == count
    if count > 1:
        assert {0, 39} <= set(read)


# ------------------------------------------------------------------------ train.async_checkpoint


class _Built(Exception):
    """Stops Trainer.run once its checkpointer is built."""


@pytest.mark.parametrize("async_checkpoint", [True, False])
def test_async_checkpoint_chooses_background_or_blocking_saves(fashion_mnist_env, tmp_path,
                                                                monkeypatch, async_checkpoint):
    """train.async_checkpoint reaches the run's orbax checkpoint manager: an AsyncCheckpointer
    (saves written in a background thread) when on, a blocking Checkpointer when off."""
    import orbax.checkpoint as ocp

    from train import checkpointing, trainer as trainer_module

    managers = []

    class Recording(checkpointing.Checkpointer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            managers.append(type(self._manager._checkpointer))
            self.close()
            raise _Built

    monkeypatch.setattr(trainer_module, "Checkpointer", Recording)
    config = _config("configs/vit/fashion_mnist.py:smoke",
                     **{"train.async_checkpoint": async_checkpoint})
    with pytest.raises(_Built):
        trainer_module.Trainer(config, tmp_path).run()
    assert len(managers) == 1
    assert issubclass(managers[0], ocp.AsyncCheckpointer) == async_checkpoint


# ---------------------------------------------------------------- data.worker_count


@pytest.mark.parametrize("spec, module, function, data", [
    ("configs/vit/fashion_mnist.py:smoke", "train.tasks.image_data", "image_batches",
     "fashion_mnist_env"),
    ("configs/vit/mae.py:smoke", "train.tasks.image_data", "image_batches", "fashion_mnist_env"),
    ("configs/transformer/translate.py:smoke", "train.tasks.translate", "translation_batches",
     "bible_env")])
def test_worker_count_reaches_the_training_pipeline(request, monkeypatch, spec, module, function,
                                                    data):
    """data.worker_count is what the task's training pipeline is given (the pipelines' own
    tests, test_data.py and test_text_pipeline.py, show what the workers do), and evaluation
    is left in this process."""
    import importlib

    from train.tasks import get_task

    request.getfixturevalue(data)

    pipelines = importlib.import_module(module)
    data_module = next(m for m in vars(pipelines).values()
                       if getattr(m, function, None) is not None and hasattr(m, "__file__"))
    calls = []
    monkeypatch.setattr(data_module, function, lambda *a, **kw: calls.append(kw))
    task = get_task(_config(spec, **{"data.worker_count": 3}))
    task.train_iterator(batch_size=4, seed=0, process_index=0, process_count=1)
    task.eval_batches(batch_size=4, process_index=0, process_count=1)
    assert calls[0]["worker_count"] == 3 and calls[0]["train"] is True
    assert calls[1].get("worker_count", 0) == 0 and calls[1]["train"] is False


def test_worker_count_reaches_the_wikipedia_stream_and_is_refused_for_local_corpora(
        monkeypatch, tmp_path):
    """BERT on a TFDS Wikipedia stream: data.worker_count is what the stream is given (each
    phase's; tests/test_pretraining_stream.py shows what the workers do); on the local corpora,
    read whole in this process, a ConfigError that names the key, before any data is read."""
    from data.builders import sources
    from data.pipelines import pretraining_stream
    from train.config import ConfigError
    from train.tasks.bert_pretrain import BertPretrainingTask

    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    monkeypatch.setattr(sources, "get_data_source", lambda name, split, source="local":
                        _Articles(40))
    calls = []
    monkeypatch.setattr(pretraining_stream, "stream_batches",
                        lambda *a, **kw: calls.append(kw) or iter([]))
    config = _config("configs/bert/pretrain.py:smoke,data=wikipedia",
                     **{"data.worker_count": 3, "data.phase2_fraction": 0.0})
    BertPretrainingTask(config).train_iterator(batch_size=4, seed=0, process_index=0,
                                               process_count=1)
    assert [kw["worker_count"] for kw in calls] == [3]
    for spec, value, match in (("configs/bert/pretrain.py:smoke", 2, "applies to "
                                "data.source='tfds'"),
                               ("configs/bert/pretrain.py:smoke,data=wikipedia", -1, ">= 0")):
        with pytest.raises(ConfigError, match=f"config.data.worker_count={value}.*{match}"):
            BertPretrainingTask(_config(spec, **{"data.worker_count": value}))


# ------------------------------------------------------------------------- fashion_mnist:val
def test_the_val_variant_holds_out_a_tenth_of_train_and_never_reads_test(fashion_mnist_env):
    """configs/vit/fashion_mnist.py:val chooses settings without the test split: it trains on
    the first 90% of train and evaluates on the other 10%, which together are train, apart."""
    from data.builders import sources

    config = _config("configs/vit/fashion_mnist.py:val,smoke")
    data = config.data
    train, held_out, whole = (sources.get_data_source(data.name, split)
                              for split in (data.train_split, data.eval_split, "train"))
    assert len(train) + len(held_out) == len(whole) and len(held_out) >= len(whole) // 10
    np.testing.assert_array_equal(held_out[0]["image"], whole[len(train)]["image"])
    np.testing.assert_array_equal(train[len(train) - 1]["image"], whole[len(train) - 1]["image"])
    assert "test" not in (data.train_split, data.eval_split)
