"""A small stand-in for all-MiniLM-L6-v2, laid out as `python -m data.fetch minilm` leaves the
real one (data/fetching/pretrained.py `minilm_dir`), so that `config.init='minilm'` runs without
the download: an HF BERT of other sizes than any config here, random weights, and an uncased
WordPiece vocabulary of letters, digits, punctuation and a few words."""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np

from data.vocab import wordpiece
from data.fetching import catalog, raw
from models.bert import BertConfig
from models.hf_bert import hf_names, params_from_hf, save_hf_checkpoint

WORDS = ("the", "and", "you", "free", "call", "now", "win", "cash", "prize", "text", "to", "for")


def standin_tokenizer() -> wordpiece.WordPieceTokenizer:
    pieces = list(string.ascii_lowercase + string.digits + string.punctuation)
    tokens = [*wordpiece.SPECIAL_TOKENS, *pieces, *(wordpiece.PREFIX + p for p in pieces), *WORDS]
    return wordpiece.from_vocab({t: i for i, t in enumerate(tokens)}, lowercase=True)


def install_minilm_standin(root: Path, **sizes) -> tuple[Path, BertConfig]:
    """Writes the stand-in under data root `root`; returns (its model folder, its BertConfig)."""
    tokenizer = standin_tokenizer()
    fields = dict(hidden_size=24, num_layers=3, num_heads=2, mlp_dim=40,
                  max_position_embeddings=48)
    cfg = BertConfig(vocab_size=tokenizer.vocab_size, **{**fields, **sizes})
    rng = np.random.default_rng(0)
    tensors = {name: rng.normal(scale=0.05, size=shape).astype(np.float32)
               for name, shape in hf_names(cfg, "model").items()}
    raw_dir = root / "raw" / "minilm"
    folder = raw_dir / catalog.MINILM_DIR
    save_hf_checkpoint(folder, cfg, params_from_hf(tensors, cfg, head="model"))
    (folder / "tokenizer.json").write_text(tokenizer.tokenizer_json)
    tokenizer.save_vocab_txt(folder / "vocab.txt")
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}))
    expected = catalog.get_source("minilm").expected
    (raw_dir / raw.MARKER).write_text(json.dumps(
        {"files": {rel: {"size": (raw_dir / rel).stat().st_size} for rel in expected}}))
    return folder, cfg
