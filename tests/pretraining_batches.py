"""The BERT pretraining pipeline (data/pipelines/pretraining.py) as the pretraining-data tests run
it: a WordPiece vocabulary trained on tests/english_documents.py and the pipeline's defaults for
them, and helpers to read its batches."""

from __future__ import annotations

import numpy as np

from data.pipelines import pretraining as pt
from data.vocab import wordpiece as wp
from english_documents import DOCS, VOCAB_SIZE


def english_tokenizer() -> wp.WordPieceTokenizer:
    return wp.train_wordpiece(wp.document_texts(DOCS), vocab_size=VOCAB_SIZE, lowercase=True)


def rows(batches: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def originals(b: dict[str, np.ndarray]) -> np.ndarray:
    """The unmasked ids: input_ids with the labels put back at the predicted positions."""
    ids = b["input_ids"].copy()
    r, c = np.nonzero(b["masked_weights"] > 0)
    ids[r, b["masked_positions"][r, c]] = b["masked_ids"][r, c]
    return ids


def batches(tok, docs=DOCS, **kwargs):
    """The pipeline on `docs` with these tests' defaults."""
    kwargs.setdefault("masking", pt.masking_config(tok, max_predictions=20))
    kwargs.setdefault("max_seq_length", 64)
    kwargs.setdefault("batch_size", 16)
    kwargs.setdefault("seed", 0)
    kwargs.setdefault("train", True)
    return pt.pretraining_batches(docs, tok, **kwargs)
