"""Tests of the shared SentencePiece vocabulary and the translation pipeline (data/text.py)."""

from __future__ import annotations

import collections
import json
import pickle
import re
import threading

import numpy as np
import pytest

from data import sentencepiece_vocab as sv
from data import text
from data.errors import DataError

# English / Spanish sentence pairs written for these tests.
PAIRS = [
    ("Where is the train station?", "¿Dónde está la estación de tren?"),
    ("I would like a cup of coffee, please.", "Quisiera una taza de café, por favor."),
    ("The children are playing in the garden.", "Los niños están jugando en el jardín."),
    ("My sister lives in a small town near the sea.",
     "Mi hermana vive en un pueblo pequeño cerca del mar."),
    ("We have to leave before it gets dark.", "Tenemos que salir antes de que oscurezca."),
    ("The book is on the table.", "El libro está sobre la mesa."),
    ("Can you help me carry these boxes?", "¿Puedes ayudarme a llevar estas cajas?"),
    ("It rained all night and the streets are wet.",
     "Llovió toda la noche y las calles están mojadas."),
    ("He forgot his keys at the office.", "Olvidó sus llaves en la oficina."),
    ("The museum opens at nine in the morning.", "El museo abre a las nueve de la mañana."),
    ("She is reading a letter from her grandmother.", "Ella está leyendo una carta de su abuela."),
    ("How much does this shirt cost?", "¿Cuánto cuesta esta camisa?"),
    ("They bought fresh bread at the market.", "Compraron pan fresco en el mercado."),
    ("The doctor says that I need to rest.", "El médico dice que necesito descansar."),
    ("Our teacher explained the lesson again.", "Nuestro profesor explicó la lección otra vez."),
    ("The river crosses the whole valley.", "El río atraviesa todo el valle."),
    ("I do not understand what you are saying.", "No entiendo lo que estás diciendo."),
    ("The cat sleeps on the chair by the window.",
     "El gato duerme en la silla junto a la ventana."),
    ("We will travel to the mountains in summer.", "Viajaremos a las montañas en verano."),
    ("Please close the door when you leave.", "Por favor, cierra la puerta cuando salgas."),
    ("The soup is too hot to eat.", "La sopa está demasiado caliente para comerla."),
    ("My father works in a hospital.", "Mi padre trabaja en un hospital."),
    ("The bus arrives every twenty minutes.", "El autobús llega cada veinte minutos."),
    ("They were singing old songs together.", "Cantaban juntos canciones antiguas."),
    ("This road leads to the old castle.", "Este camino lleva al castillo viejo."),
    ("I lost my umbrella on the way home.", "Perdí mi paraguas de camino a casa."),
    ("The shop closes early on Sundays.", "La tienda cierra temprano los domingos."),
    ("Water boils at one hundred degrees.", "El agua hierve a cien grados."),
    ("She wrote her name on the first page.", "Escribió su nombre en la primera página."),
    ("The baby is sleeping, speak quietly.", "El bebé está durmiendo, habla en voz baja."),
    ("We ate fish and rice for dinner.", "Cenamos pescado con arroz."),
    ("Turn left at the next corner.", "Gira a la izquierda en la próxima esquina."),
    ("The garden is full of red flowers.", "El jardín está lleno de flores rojas."),
    ("He runs in the park every morning.", "Él corre en el parque todas las mañanas."),
    ("The meeting was moved to Thursday.", "La reunión se cambió al jueves."),
    ("I need a new pair of shoes.", "Necesito un par de zapatos nuevos."),
    ("The wind blew the leaves away.", "El viento se llevó las hojas."),
    ("Do you know where the library is?", "¿Sabes dónde está la biblioteca?"),
    ("Yes.", "Sí."),
    ("In the beginning the earth was without form, and the waters covered the land, and "
     "darkness was upon the face of the deep while the wind moved over the waters.",
     "En el principio la tierra estaba desordenada y vacía, y las aguas cubrían la tierra, y "
     "las tinieblas estaban sobre la faz del abismo mientras el viento se movía sobre las "
     "aguas."),
]
KEYS = ("en", "es")
VOCAB = 200


def make_examples(n=None, *, as_bytes=False):
    """Examples like the bible_en_es source: {'en', 'es', 'ref'}; bytes or str values."""
    pairs = PAIRS if n is None else [PAIRS[i % len(PAIRS)] for i in range(n)]
    enc = (lambda s: s.encode("utf-8")) if as_bytes else (lambda s: s)
    return [{"en": enc(en), "es": enc(es), "ref": enc(f"Test {i}:1")}
            for i, (en, es) in enumerate(pairs)]


def texts_fn():
    for en, es in PAIRS:
        yield en
        yield es


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return sv.load_or_train("test_pairs.train.en+es", texts_fn, vocab_size=VOCAB,
                            cache_dir=tmp_path_factory.mktemp("vocab"), verbose=False)


def train_batches(source, tokenizer, **kwargs):
    return text.translation_batches(source, tokenizer, train=True, **kwargs)


def eval_batches(source, tokenizer, **kwargs):
    return text.translation_batches(source, tokenizer, train=False, **kwargs)


def take(iterator, n):
    return [next(iterator) for _ in range(n)]


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def segments(row_tokens, row_segmentation):
    """{segment id: tokens} of one packed row."""
    return {int(s): row_tokens[row_segmentation == s].tolist()
            for s in np.unique(row_segmentation) if s}


def expected_tokens(tok, examples, max_length):
    """(inputs, targets) token lists of every example, truncated with EOS as the pipeline does."""
    out = []
    for e in examples:
        src = tok.encode(e["en"])[: max_length - 1] + [sv.EOS_ID]
        tgt = tok.encode(e["es"])[: max_length - 1] + [sv.EOS_ID]
        out.append((tuple(src), tuple(tgt)))
    return out


# ------------------------------------------------------------------------------- vocabulary


def test_special_ids_and_round_trip(tokenizer):
    assert (tokenizer.pad_id, tokenizer.eos_id, tokenizer.unk_id, tokenizer.bos_id) == (0, 1, 2, 3)
    assert [tokenizer.id_to_piece(i) for i in range(4)] == ["<pad>", "</s>", "<unk>", "<s>"]
    assert tokenizer.vocab_size == VOCAB
    for en, es in PAIRS:
        for sentence in (en, es):
            ids = tokenizer.encode(sentence)
            assert sv.EOS_ID not in ids and sv.BOS_ID not in ids and sv.PAD_ID not in ids
            assert tokenizer.decode(ids) == sentence
            assert tokenizer.encode(sentence.encode("utf-8")) == ids  # bytes accepted
            # decode stops at EOS and skips BOS / padding
            assert tokenizer.decode([sv.BOS_ID, *ids, sv.EOS_ID, 7, 8, 0, 0]) == sentence
    clone = pickle.loads(pickle.dumps(tokenizer))
    assert clone.encode(PAIRS[0][1]) == tokenizer.encode(PAIRS[0][1])


def test_cache_reused_and_settings_give_other_files(tmp_path, monkeypatch):
    first = sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB, cache_dir=tmp_path,
                             verbose=False)
    path = first.path
    assert path.parent == tmp_path and path.exists()
    for part in ("pairs.train.en+es", "unigram", f"v{VOCAB}", "cov1", "max1000000"):
        assert part in path.name
    mtime = path.stat().st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError("trained again instead of using the cache")

    monkeypatch.setattr(sv, "_train_model", no_training)
    again = sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB, cache_dir=tmp_path,
                             verbose=False)
    assert again.path == path and path.stat().st_mtime_ns == mtime
    assert again.model_proto == first.model_proto
    monkeypatch.undo()

    settings = dict(vocab_size=VOCAB, model_type="unigram", character_coverage=1.0,
                    max_sentences=1_000_000, cache_dir=tmp_path)
    changes = [("name", "pairs.train.en+fr"), ("vocab_size", VOCAB - 8), ("model_type", "bpe"),
               ("character_coverage", 0.9995), ("max_sentences", 50)]
    paths = {path}
    for key, value in changes:
        name = value if key == "name" else "pairs.train.en+es"
        other = {**settings, **({} if key == "name" else {key: value})}
        paths.add(sv.cache_path(name, **other))
    assert len(paths) == len(changes) + 1
    # split strings with odd characters stay distinct
    assert (sv.cache_path("d.train[:90%].en", vocab_size=8) !=
            sv.cache_path("d.train[:10%].en", vocab_size=8))

    bpe = sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB - 8,
                           model_type="bpe", cache_dir=tmp_path, verbose=False)
    assert bpe.path != path and bpe.vocab_size == VOCAB - 8
    assert bpe.decode(bpe.encode(PAIRS[3][1])) == PAIRS[3][1]


def test_default_cache_is_under_data_root(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    tok = sv.vocab_for_source(make_examples(), KEYS, dataset="pairs", split="train",
                              vocab_size=VOCAB, verbose=False)
    assert tok.path.parent == tmp_path / "vocab"
    assert tok.path.name.startswith("pairs.train.en+es.")


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_training_is_deterministic(model_type):
    kwargs = dict(vocab_size=VOCAB - 8, model_type=model_type, character_coverage=1.0)
    assert sv._train_model(texts_fn(), **kwargs) == sv._train_model(texts_fn(), **kwargs)


def test_corrupt_cache_raises_naming_the_file(tmp_path):
    path = sv.cache_path("pairs.train.en+es", vocab_size=VOCAB, cache_dir=tmp_path)
    path.write_bytes(b"\x00this is not a sentencepiece model\xff" * 10)
    with pytest.raises(DataError, match="delete") as error:
        sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB, cache_dir=tmp_path,
                         verbose=False)
    assert str(path) in str(error.value)
    assert path.read_bytes().startswith(b"\x00this is not")  # never overwritten


def test_cache_file_of_other_settings_is_rejected(tmp_path):
    tok = sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB - 8,
                           cache_dir=tmp_path, verbose=False)
    wrong = sv.cache_path("pairs.train.en+es", vocab_size=VOCAB, cache_dir=tmp_path)
    wrong.write_bytes(tok.path.read_bytes())  # a model of another size under this name
    with pytest.raises(DataError, match=re.escape(str(wrong))):
        sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB, cache_dir=tmp_path,
                         verbose=False)


def test_concurrent_callers_train_once(tmp_path, monkeypatch):
    trainings = []
    train = sv._train_model

    def counting(*args, **kwargs):
        trainings.append(1)
        return train(*args, **kwargs)

    monkeypatch.setattr(sv, "_train_model", counting)
    results = [None] * 3

    def call(i):
        results[i] = sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB,
                                      cache_dir=tmp_path, verbose=False)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(trainings) == 1
    assert len({r.model_proto for r in results}) == 1
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == [
        results[0].path.name]  # no temporary file left behind


def test_source_texts_spread_over_the_source():
    examples = make_examples()
    texts = list(sv.source_texts(examples, KEYS, max_sentences=10)())
    assert len(texts) == 10
    assert texts[:2] == list(PAIRS[0]) and texts[-2:] == list(PAIRS[-1])
    assert list(sv.source_texts(make_examples(as_bytes=True), KEYS)())[1] == PAIRS[0][1]


def test_load_or_train_for_dataset_opens_the_source_only_to_train(tmp_path, monkeypatch):
    import data.sources

    opened = []

    def fake_source(name, split, *, source="local"):
        opened.append((name, split, source))
        return make_examples()

    monkeypatch.setattr(data.sources, "get_data_source", fake_source)
    kwargs = dict(split="train", keys=KEYS, vocab_size=VOCAB, cache_dir=tmp_path, verbose=False)
    tok = sv.load_or_train_for_dataset("pairs", **kwargs)
    assert opened == [("pairs", "train", "local")]
    assert tok.path.name.startswith("pairs.train.en+es.")
    assert sv.load_or_train_for_dataset("pairs", **kwargs).model_proto == tok.model_proto
    assert len(opened) == 1  # the cache hit did not open the dataset


def test_too_large_vocabulary_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="lower vocab_size"):
        sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=50_000, cache_dir=tmp_path,
                         verbose=False)
    assert not list(tmp_path.glob("*.model"))


# --------------------------------------------------------------------------------- training


def test_packed_batches_hold_every_example_once(tokenizer):
    examples = make_examples(as_bytes=True)
    max_length, rows = 24, 4
    it = train_batches(examples, tokenizer, source_key="en", target_key="es", batch_size=rows,
                            max_length=max_length, seed=3)
    want = expected_tokens(tokenizer, examples, max_length)
    seen = []
    while len(seen) < len(examples):
        batch = next(it)
        assert sorted(batch) == sorted(text.ARRAY_KEYS)
        for key in text.ARRAY_KEYS:
            assert batch[key].dtype == np.int32 and batch[key].shape == (rows, max_length), key
        for r in range(rows):
            for side in ("inputs", "targets"):
                seg = batch[f"{side}_segmentation"][r]
                pos = batch[f"{side}_position"][r]
                ids = np.unique(seg[seg > 0])
                np.testing.assert_array_equal(ids, np.arange(1, len(ids) + 1))  # 1, 2, ...
                # segments are contiguous, padding only at the end, positions restart at 0
                assert np.all(np.diff(seg[seg > 0]) >= 0) and np.all(seg[np.sum(seg > 0):] == 0)
                for s in ids:
                    np.testing.assert_array_equal(pos[seg == s], np.arange(np.sum(seg == s)))
                assert np.all(pos[seg == 0] == 0) and np.all(batch[side][r][seg == 0] == 0)
            src = segments(batch["inputs"][r], batch["inputs_segmentation"][r])
            tgt = segments(batch["targets"][r], batch["targets_segmentation"][r])
            assert src.keys() == tgt.keys()  # both sides of an example share the segment id
            seen += [(tuple(src[s]), tuple(tgt[s])) for s in sorted(src)]
    # The batches hold the first len(seen) examples of the stream (see the next test): the
    # whole first epoch, each example once, and the start of the second.
    extra = collections.Counter(seen) - collections.Counter(want)
    assert not collections.Counter(want) - collections.Counter(seen)
    assert sum(extra.values()) == len(seen) - len(examples)
    assert it.stats["examples"] == len(seen)


def test_packed_matches_unpacked_decoded(tokenizer):
    """Packed batches decoded back give the examples of the unpacked pipeline (same stream).

    A batch of first-fit packing holds a contiguous stretch of the example stream (its rows are
    the packing bins), so k packed batches hold exactly the first m_k unpacked examples.
    """
    examples = make_examples()
    common = dict(source_key="en", target_key="es", max_length=96, seed=5)
    unpacked = train_batches(examples, tokenizer, batch_size=1, pack=False, **common)
    packed = train_batches(examples, tokenizer, batch_size=4, pack=True, **common)
    decoded = []
    while len(decoded) < 2 * len(examples):  # two epochs: the second is reshuffled
        batch = next(packed)
        for r in range(4):
            src_seg, tgt_seg = batch["inputs_segmentation"][r], batch["targets_segmentation"][r]
            for s in np.unique(src_seg[src_seg > 0]):
                decoded.append((tokenizer.decode(batch["inputs"][r][src_seg == s]),
                                tokenizer.decode(batch["targets"][r][tgt_seg == s])))
    rows = take(unpacked, len(decoded))
    for row in rows:
        np.testing.assert_array_equal(row["inputs_segmentation"], row["inputs"] != 0)
        n = int(row["targets_segmentation"].sum())
        np.testing.assert_array_equal(row["targets_position"][0, :n], np.arange(n))
    want = [(tokenizer.decode(row["inputs"][0]), tokenizer.decode(row["targets"][0]))
            for row in rows]
    assert sorted(decoded) == sorted(want)
    assert sorted(want[: len(examples)]) == sorted(PAIRS)  # nothing truncated at 96 tokens
    assert want[: len(examples)] != want[len(examples):]  # the second epoch is reshuffled
    assert packed.stats["examples"] == unpacked.stats["examples"] == len(decoded)


def test_truncation_policy_and_count(tokenizer):
    examples = make_examples()
    max_length = 20
    want = expected_tokens(tokenizer, examples, max_length)
    n_long = sum(len(tokenizer.encode(e["en"])) + 1 > max_length
                 or len(tokenizer.encode(e["es"])) + 1 > max_length for e in examples)
    assert 0 < n_long < len(examples)
    it = train_batches(examples, tokenizer, source_key="en", target_key="es",
                            batch_size=len(examples), max_length=max_length, seed=0, pack=False)
    batch = next(it)
    got = []
    for r in range(len(examples)):
        src = batch["inputs"][r][batch["inputs_segmentation"][r] > 0].tolist()
        tgt = batch["targets"][r][batch["targets_segmentation"][r] > 0].tolist()
        assert src[-1] == sv.EOS_ID and tgt[-1] == sv.EOS_ID and len(src) <= max_length
        got.append((tuple(src), tuple(tgt)))
    assert sorted(got) == sorted(want)
    assert it.last_stats == {"examples": len(examples), "truncated": n_long, "dropped": 0}
    assert it.stats == it.last_stats


def test_drop_policy_skips_and_counts(tokenizer):
    examples = make_examples()
    max_length = 22
    fits = [(s, t) for s, t in expected_tokens(tokenizer, examples, 10_000)
            if len(s) <= max_length and len(t) <= max_length]
    n_drop = len(examples) - len(fits)
    assert 0 < n_drop < len(examples)
    common = dict(source_key="en", target_key="es", max_length=max_length, seed=0,
                  long_examples="drop")
    # one example per row: the stream order is visible
    it = train_batches(examples, tokenizer, batch_size=1, pack=False, **common)
    rows = take(it, len(fits))
    first_epoch = [(tuple(r["inputs"][0][r["inputs"][0] > 0]),
                    tuple(r["targets"][0][r["targets"][0] > 0])) for r in rows]
    assert sorted(first_epoch) == sorted(fits)
    # a dropped example is counted with the next kept one (maybe the next epoch's first)
    assert it.stats["dropped"] <= n_drop and it.stats["truncated"] == 0
    next(it)
    assert it.stats["dropped"] >= n_drop
    # packed: only fitting examples, never truncated
    packed = train_batches(examples, tokenizer, batch_size=3, **common)
    for batch in take(packed, 10):
        for r in range(3):
            src = segments(batch["inputs"][r], batch["inputs_segmentation"][r])
            tgt = segments(batch["targets"][r], batch["targets_segmentation"][r])
            assert {(tuple(src[s]), tuple(tgt[s])) for s in src} <= set(fits)
    assert packed.stats["truncated"] == 0 and packed.stats["dropped"] > 0
    counts = text.long_example_counts(packed)
    assert counts == {k: float(v) for k, v in packed.stats.items()}


def test_drop_of_everything_is_a_data_error(tokenizer):
    it = train_batches(make_examples(), tokenizer, source_key="en", target_key="es",
                            batch_size=2, max_length=2, seed=0, long_examples="drop")
    with pytest.raises(DataError, match="longer than max_length"):
        next(it)


def test_resume_is_exact(tokenizer):
    common = dict(source_key="en", target_key="es", batch_size=3, max_length=20, seed=7,
                  long_examples="drop")
    examples = make_examples()
    it = train_batches(examples, tokenizer, **common)
    take(it, 5)
    state = it.get_state()
    stats = dict(it.stats)
    following = take(it, 25)  # crosses epoch boundaries
    restored = train_batches(examples, tokenizer, **common)
    restored.set_state(state)
    assert restored.stats == stats
    assert_batches_equal(following, take(restored, 25))
    assert restored.stats == it.stats
    json.dumps(state)  # checkpointable as JSON


def test_process_shards_disjoint_and_covering(tokenizer):
    """Each process's shard of one epoch: disjoint, and together every example once."""
    examples = make_examples()  # 40 distinct pairs: shards of 14, 13 and 13
    count = 3
    per_process = []
    for index in range(count):
        it = train_batches(examples, tokenizer, source_key="en", target_key="es", batch_size=1,
                                max_length=96, seed=11, pack=False, process_index=index,
                                process_count=count)
        shard = len(range(index, len(examples), count))
        per_process.append([tokenizer.decode(next(it)["inputs"][0]) for _ in range(shard)])
    flat = [s for shard in per_process for s in shard]
    assert sorted(flat) == sorted(e["en"] for e in examples)


def test_bad_arguments(tokenizer):
    examples = make_examples()
    with pytest.raises(DataError, match="long_examples"):
        train_batches(examples, tokenizer, source_key="en", target_key="es", batch_size=2,
                           max_length=8, seed=0, long_examples="cut")
    for bad in (dict(pack=True), dict(long_examples="drop")):  # eval never packs or drops
        with pytest.raises(DataError, match="evaluation"):
            eval_batches(examples, tokenizer, source_key="en", target_key="es", batch_size=2,
                         max_length=8, **bad)
    with pytest.raises(DataError, match="'de'"):
        train_batches(examples, tokenizer, source_key="de", target_key="es", batch_size=2,
                           max_length=8, seed=0)


def test_worker_processes_resume_exactly(tokenizer):
    """grain worker processes (the tokenizer pickled into them), and their state restored."""
    examples = make_examples()
    common = dict(source_key="en", target_key="es", batch_size=4, max_length=24, seed=2)
    it = train_batches(examples, tokenizer, worker_count=2, **common)
    batches = take(it, 6)
    state = it.get_state()
    following = take(it, 3)
    it.close()
    restored = train_batches(examples, tokenizer, worker_count=2, **common)
    restored.set_state(state)
    assert_batches_equal(following, take(restored, 3))
    restored.close()
    assert all(sorted(b) == sorted(text.ARRAY_KEYS) for b in batches)


# ------------------------------------------------------------------------------------- eval


@pytest.mark.parametrize("process_count", [1, 2])
def test_eval_pads_with_mask_and_keeps_texts(tokenizer, process_count):
    examples = make_examples()  # 40 examples, the last one long
    batch_size, max_length = 6, 16
    steps = text.num_batches(len(examples), batch_size=batch_size, process_count=process_count)
    assert steps == -(-len(examples) // (batch_size * process_count))
    got_src, got_tgt, truncated = [], [], 0
    for index in range(process_count):
        it = eval_batches(examples, tokenizer, source_key="en", target_key="es",
                               batch_size=batch_size, max_length=max_length,
                               process_index=index, process_count=process_count)
        batches = list(it)
        assert len(batches) == steps
        for batch in batches:
            assert sorted(batch) == sorted((*text.ARRAY_KEYS, "mask", "index", *text.TEXT_KEYS))
            assert batch["mask"].dtype == np.float32 and batch["mask"].shape == (batch_size,)
            assert batch["inputs"].shape == (batch_size, max_length)
            real = batch["mask"] == 1
            assert batch["index"].dtype == np.int32 and np.all(batch["index"][~real] == -1)
            assert np.all(batch["inputs"][~real] == 0)
            assert np.all(batch["source_text"][~real] == "")
            for j in np.flatnonzero(real):
                ids = batch["inputs"][j][batch["inputs_segmentation"][j] > 0]
                assert ids[-1] == sv.EOS_ID
                assert tokenizer.decode(ids) in batch["source_text"][j]
                assert batch["source_text"][j] == PAIRS[batch["index"][j]][0]
                assert batch["target_text"][j] == PAIRS[batch["index"][j]][1]
            got_src += list(batch["source_text"][real])
            got_tgt += list(batch["target_text"][real])
            assert set(text.without_text(batch)) == {*text.ARRAY_KEYS, "mask", "index"}
        truncated += it.stats["truncated"]
        assert it.stats["dropped"] == 0
    assert sorted(got_src) == sorted(en for en, _ in PAIRS)  # every example exactly once
    assert PAIRS[-1][1] in got_tgt  # the long reference is kept whole for BLEU
    assert truncated >= 1
    if process_count == 1:
        assert got_src == [en for en, _ in PAIRS]  # in order


def test_tfds_array_record_source(tmp_path):
    """A real TFDS array_record data source (texts come back as bytes) through both pipelines."""
    import tensorflow_datasets as tfds

    class TextPairsForTest(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            text_feature = tfds.features.Text
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
                {"en": text_feature(), "es": text_feature(), "ref": text_feature()}))

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples(), "test": self._generate_examples()}

        def _generate_examples(self):
            for i, (en, es) in enumerate(PAIRS):
                yield i, {"en": en, "es": es, "ref": f"Test {i}:1"}

    builder = TextPairsForTest(data_dir=tmp_path / "tfds", file_format="array_record")
    builder.download_and_prepare()
    train, test = (builder.as_data_source(split=split) for split in ("train", "test"))
    assert isinstance(train[0]["en"], bytes)
    tok = sv.vocab_for_source(train, KEYS, vocab_size=VOCAB, cache_dir=tmp_path, verbose=False)
    assert tok.path.name.startswith(f"{builder.name}.train.en+es.")
    it = train_batches(train, tok, source_key="en", target_key="es", batch_size=4,
                       max_length=32, seed=0)
    assert sorted(next(it)) == sorted(text.ARRAY_KEYS)
    batches = list(eval_batches(test, tok, source_key="en", target_key="es", batch_size=16,
                                max_length=32))
    texts = [t for b in batches for t, m in zip(b["target_text"], b["mask"]) if m]
    assert sorted(texts) == sorted(es for _, es in PAIRS)
