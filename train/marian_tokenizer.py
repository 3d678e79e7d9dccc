"""A translation run's SentencePiece vocabulary as Hugging Face MarianTokenizer files, and back.

    files = tokenizer_files(tokenizer, ids, max_length)     # {name: bytes}, beside the weights
    tokenizer = read_tokenizer(folder, ids)                  # a project Tokenizer, or None

A Marian folder's tokenizer (HF ``MarianTokenizer``) is
  source.spm, target.spm   SentencePiece models that cut the source and the target text into pieces
  vocab.json               {piece: id of the model}: how the pieces become the model's ids
  tokenizer_config.json    its settings
The project's translation pipeline reads one SentencePiece model whose own ids are the model's
(pad 0, eos 1, unk 2, bos 3: data/vocab/sentencepiece.py). `python -m train.export` writes that
model as both .spm files and a vocab.json that maps each of its pieces to its id in Marian's
numbering (models/hf_marian.py, ``MarianIds``: padding last, the others down one), so HF's
MarianTokenizer turns a text into exactly the ids our pipeline gives, renumbered; and
`read_tokenizer` recognises such a folder and gives back the project's tokenizer, which then is
the vocabulary of a run that starts from it (train/translate_init.py).

The OPUS-MT models' own tokenizers are not of this kind: their SentencePiece models number the
pieces otherwise and vocab.json remaps them (often two models and two vocabularies, one per
language). The pipeline cannot tokenize with those, and a run fine-tuned on other ids would
learn garbage, so `read_tokenizer` refuses them, naming what differs.
"""

from __future__ import annotations

import json
import pathlib

from data.errors import DataError
from data.vocab import sentencepiece as sentencepiece_vocab
from models.hf_marian import MarianIds
from train.config import ConfigError

SOURCE, TARGET, VOCAB, SETTINGS = ("source.spm", "target.spm", "vocab.json",
                                   "tokenizer_config.json")
TARGET_VOCAB = "target_vocab.json"   # separate vocabularies (HF's separate_vocabs)


def tokenizer_files(tokenizer: sentencepiece_vocab.Tokenizer, ids: MarianIds,
                    max_length: int) -> dict[str, bytes]:
    """{file name: contents} of ``tokenizer`` as MarianTokenizer reads it (module docstring);
    ``ids`` the model's Marian numbering, ``max_length`` its position table."""
    if tokenizer.vocab_size != ids.vocab_size:
        raise ConfigError(f"the vocabulary has {tokenizer.vocab_size} pieces, the model "
                          f"{ids.vocab_size} token ids")
    vocab = {tokenizer.id_to_piece(i): int(ids.theirs(i)) for i in range(tokenizer.vocab_size)}
    pad, eos, unk = (tokenizer.id_to_piece(i) for i in (tokenizer.pad_id, tokenizer.eos_id,
                                                        tokenizer.unk_id))
    settings = {"tokenizer_class": "MarianTokenizer", "separate_vocabs": False,
                "model_max_length": max_length, "pad_token": pad, "eos_token": eos,
                "unk_token": unk}
    return {SOURCE: tokenizer.model_proto, TARGET: tokenizer.model_proto,
            VOCAB: (json.dumps(vocab, ensure_ascii=False, indent=1) + "\n").encode("utf-8"),
            SETTINGS: (json.dumps(settings, indent=2) + "\n").encode("utf-8")}


def read_tokenizer(folder: str | pathlib.Path, ids: MarianIds
                   ) -> sentencepiece_vocab.Tokenizer | None:
    """The project tokenizer a Marian folder's tokenizer files hold (module docstring), None
    when the folder has none; ConfigError naming what differs when they are not one this
    project's pipeline can read."""
    folder = pathlib.Path(folder)  # local path: a Hugging Face folder (models/ reads local files)
    present = [name for name in (SOURCE, TARGET, VOCAB) if (folder / name).is_file()]
    if not present:
        return None
    fix = ("this project's pipeline tokenizes with one SentencePiece model whose ids are the "
           "model's (pad 0, eos 1, unk 2, bos 3), as `python -m train.export` writes it; "
           "translate with this checkpoint through HF's MarianTokenizer and "
           "models.hf_marian instead (docs/models.md)")
    if len(present) < 3:
        missing = sorted({SOURCE, TARGET, VOCAB} - set(present))
        raise ConfigError(f"{folder} holds {present} but not {missing}: an incomplete "
                          "MarianTokenizer")
    if (folder / TARGET_VOCAB).is_file():
        raise ConfigError(f"{folder} has separate source and target vocabularies "
                          f"({VOCAB}, {TARGET_VOCAB}); {fix}")
    model_proto = (folder / SOURCE).read_bytes()
    if (folder / TARGET).read_bytes() != model_proto:
        raise ConfigError(f"{folder}: {SOURCE} and {TARGET} are different SentencePiece "
                          f"models (one per language); {fix}")
    try:
        tokenizer = sentencepiece_vocab.Tokenizer(model_proto, folder / SOURCE)
    except RuntimeError as error:
        raise ConfigError(f"{folder / SOURCE} is not a SentencePiece model ({error})") from error
    problem = sentencepiece_vocab._mismatch(tokenizer, ids.vocab_size)
    if problem:
        raise ConfigError(f"{folder / SOURCE} has {problem}: its ids are not the model's; {fix}")
    try:
        vocab = json.loads((folder / VOCAB).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise DataError(f"{folder / VOCAB} is not a JSON file ({error})") from error
    wanted = {tokenizer.id_to_piece(i): int(ids.theirs(i)) for i in range(tokenizer.vocab_size)}
    if vocab != wanted:
        differ = sorted(p for p in set(vocab) | set(wanted) if vocab.get(p) != wanted.get(p))
        raise ConfigError(f"{folder / VOCAB} maps {len(differ)} pieces (e.g. "
                          f"{differ[:3]}) to other ids than {SOURCE} gives them, renumbered "
                          f"for Marian; {fix}")
    return tokenizer
