"""A run's vocabulary, kept in its workdir from the first start on.

    DIR/vocabulary/tokenizer.json        a WordPiece vocabulary (BERT pretraining, fine-tuning)
    DIR/vocabulary/sentencepiece.model   a SentencePiece model (translation)
    DIR/vocabulary/bpe.json              a byte-level BPE vocabulary (causal LM)
    DIR/vocabulary/settings.json         the config settings it was built from (none for a
                                         vocab_file's or a pretrained model's)

The vocabulary a task builds at a run's first start comes from the config: a file it names
(config.data.vocab_file), a pretrained model's, or one trained on the training texts and cached
under the data root by dataset name and settings (data/vocab/wordpiece.py,
data/vocab/sentencepiece.py, data/vocab/bpe.py).
The cache can change under a run: deleted and retrained, retrained on another version of the
texts, or read from another data root. A vocabulary of the same size but other tokens fits the
checkpoint's embedding table and would be accepted without a word, every id now meaning another
piece. So the trainer writes the vocabulary here when the run starts (process 0) and gives it to
the task at every later start of the same workdir (`for_start` -> `get_task(config,
saved_vocabulary)`, `choose` in the task), and fine-tuning from a pretraining workdir reads it
here too (train/finetune_init.py). The workdir must be one folder seen by every process, as the
checkpoints already require; the trainer checks that all processes hold the same vocabulary.

Once the workdir holds a checkpoint (before it nothing is bound to the vocabulary, which is built
again), the config may not ask for another one (even with --allow_config_change): other
settings than those recorded (the task's `vocabulary_settings`: only the keys that decided it),
a vocab_file or pretrained model with other tokens, or the other kind of vocabulary is a
ConfigError that names both (a new vocabulary needs a new --workdir). Other data keys may change: a run that goes on with other texts keeps
its vocabulary, as its embeddings need.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Callable

from etils import epath

from train import storage
from train.config import ConfigError

FOLDER = "vocabulary"
FILES = {"wordpiece": "tokenizer.json", "sentencepiece": "sentencepiece.model",
         "bpe": "bpe.json"}
SETTINGS_FILE = "settings.json"


def settings_of(config, keys) -> dict[str, Any]:
    """{'data.vocab_size': ..., ...}: the values in `config` of `keys` ('section.name'), the
    settings that decided a vocabulary built from the training texts (a task's
    `vocabulary_settings`)."""
    return {key: config[key.split(".")[0]][key.split(".")[1]] for key in keys}


def unused_size(data, tokenizer: Any) -> str | None:
    """The note a run prints for config.data.vocab_size beside a data.vocab_file of another
    size (the key sizes a vocabulary trained on the texts, not the file's: said, not silently
    dropped); None where there is no file or the sizes agree."""
    if not data.get("vocab_file") or tokenizer.vocab_size == data.vocab_size:
        return None
    return (f"config.data.vocab_size={data.vocab_size} is not used: the vocabulary is "
            f"config.data.vocab_file's ({tokenizer.vocab_size:,} tokens)")


def kind_of(tokenizer: Any) -> str:
    """'wordpiece', 'sentencepiece' or 'bpe' for the tokenizers of data/vocab/wordpiece.py,
    data/vocab/sentencepiece.py and data/vocab/bpe.py."""
    from data.vocab import bpe
    from data.vocab import sentencepiece as sentencepiece_vocab
    from data.vocab import wordpiece

    if isinstance(tokenizer, wordpiece.WordPieceTokenizer):
        return "wordpiece"
    if isinstance(tokenizer, bpe.BPETokenizer):
        return "bpe"
    if isinstance(tokenizer, sentencepiece_vocab.Tokenizer):
        return "sentencepiece"
    raise TypeError(f"{type(tokenizer).__name__} is not a vocabulary this project saves")


def _contents(tokenizer: Any) -> bytes:
    """The bytes of the saved file (and what two vocabularies are compared by, see `same`)."""
    if kind_of(tokenizer) in ("wordpiece", "bpe"):
        return tokenizer.tokenizer_json.encode("utf-8")
    return tokenizer.model_proto


def fingerprint(tokenizer: Any) -> str:
    """sha256 of what `save` writes."""
    return hashlib.sha256(_contents(tokenizer)).hexdigest()


def same(a: Any, b: Any) -> bool:
    """Whether two vocabularies turn every text into the same ids. WordPiece ones are compared by
    their tokens and casing, so a vocab.txt and the tokenizer.json made from it are the same."""
    if kind_of(a) != kind_of(b):
        return False
    if kind_of(a) == "wordpiece":
        return a.tokens == b.tokens and a.lowercase == b.lowercase and a.prefix == b.prefix
    if kind_of(a) == "bpe":
        return a.tokenizer_json == b.tokenizer_json  # the merges decide, not only the tokens
    return a.model_proto == b.model_proto


def save(workdir: str | os.PathLike, tokenizer: Any, settings: dict[str, Any]) -> epath.Path:
    """Writes `tokenizer` and the `settings` it was built from to `workdir`/vocabulary/ (each
    file atomically, the settings first); returns the vocabulary file's path."""
    folder = storage.run_path(workdir) / FOLDER
    storage.make_folder(folder)
    text = json.dumps(settings, indent=2, sort_keys=True) + "\n"
    storage.write_atomically(folder / SETTINGS_FILE, text)
    path = folder / FILES[kind_of(tokenizer)]
    storage.write_atomically(path, _contents(tokenizer))
    return path


def load(workdir: str | os.PathLike, *, fix: str | None = None) -> Any | None:
    """The vocabulary saved in `workdir`, or None when there is none (a new workdir, or one
    written before runs kept their vocabulary). DataError naming a corrupt file, with `fix`
    (what to do) or the advice for a run's own workdir."""
    from data.errors import DataError

    folder = storage.run_path(workdir) / FOLDER
    present = [kind for kind, name in FILES.items() if (folder / name).is_file()]
    if not present:
        return None
    if len(present) > 1:
        raise DataError(f"{folder} holds both {' and '.join(FILES.values())}; a run has one "
                        "vocabulary: this workdir was reused for runs of different tasks (use "
                        "one workdir per run)")
    path = folder / FILES[present[0]]
    fix = fix or ("it is the vocabulary this run's checkpoints were trained with: restore it "
                  "from a copy, or start a new --workdir")
    try:
        contents = path.read_bytes()
    except OSError as error:
        raise DataError(f"the vocabulary file {path} is unreadable ({type(error).__name__}: "
                        f"{error}); {fix}") from error
    tokenizer = _from_contents(present[0], contents, path, fix)
    tokenizer.path = path  # the data/ classes keep a local pathlib.Path; this may be a URL
    return tokenizer


def _from_contents(kind: str, contents: bytes, path: epath.Path, fix: str) -> Any:
    """The tokenizer a saved file holds (bytes read through the run's path type), checked as
    data/ checks the files it loads itself."""
    from data.errors import DataError
    from data.vocab import bpe
    from data.vocab import sentencepiece as sentencepiece_vocab
    from data.vocab import wordpiece

    try:
        if kind == "wordpiece":
            return wordpiece.WordPieceTokenizer(contents.decode("utf-8"))
        if kind == "bpe":
            return bpe.BPETokenizer(contents.decode("utf-8"))
        tokenizer = sentencepiece_vocab.Tokenizer(contents)
    except (DataError, RuntimeError, UnicodeDecodeError) as error:
        raise DataError(f"the vocabulary file {path} is corrupt ({type(error).__name__}: "
                        f"{str(error).strip()[:200]}); {fix}") from error
    problem = sentencepiece_vocab._mismatch(tokenizer, None)  # data/'s own check of a model
    if problem:
        raise DataError(f"the SentencePiece model file {path} has {problem}; it is corrupt or "
                        f"not ours: {fix}")
    return tokenizer


def for_start(workdir: str | os.PathLike) -> Any | None:
    """The saved vocabulary a start of `workdir` gives its task (`get_task(config, it)`): once
    the workdir holds a checkpoint (an orbax step folder, named by its step), whose embeddings
    were trained with it; None before, when the task builds the vocabulary again."""
    from train.workdir import has_checkpoints

    return load(workdir) if has_checkpoints(workdir) else None


def check_settings(workdir: str | os.PathLike, current: dict[str, Any]) -> None:
    """The `current` settings of a task's vocabulary (`settings_of(config, task.
    vocabulary_settings)`) must be those recorded beside the saved vocabulary: ConfigError
    naming each difference; DataError when the record is missing or corrupt."""
    from data.errors import DataError

    path = storage.run_path(workdir) / FOLDER / SETTINGS_FILE
    fix = "restore it from a copy, or start a new --workdir"
    try:
        recorded = json.loads(path.read_text())
        if not isinstance(recorded, dict):
            raise ValueError(f"a {type(recorded).__name__}, not an object")
    except (OSError, ValueError) as error:
        raise DataError(f"{path} is missing or corrupt ({type(error).__name__}: {error}); it "
                        f"records the settings of the vocabulary beside it; {fix}") from error
    changed = [f"config.{key}={current.get(key, '<absent>')!r}, the vocabulary's "
               f"{recorded.get(key, '<absent>')!r}" for key in sorted(set(recorded) | set(current))
               if recorded.get(key) != current.get(key)]
    if changed:
        raise ConfigError(f"this run's vocabulary ({path.parent}) was built with other settings: "
                          + "; ".join(changed) + ". A run keeps the vocabulary it started with "
                          "(its checkpoints' embeddings are of it): use a new --workdir for "
                          "another one")


def choose(saved: Any | None, build: Callable[[], Any], *, kind: str,
           requested: Any | None = None, where: str = "") -> Any:
    """The vocabulary a task uses: `build()` (from the config) at a run's first start, `saved`
    (from `load`, its settings checked there) at every later one.

    `requested`: a vocabulary the config names explicitly (a vocab_file, a pretrained model's),
    already loaded, and `where` that source as the config says it; with a saved vocabulary it
    must be the same (`same`). ConfigError otherwise, and for a saved one of the other `kind`.
    """
    if saved is None:
        return build()
    saved_kind = kind_of(saved)
    if saved_kind != kind:
        raise ConfigError(f"this workdir's vocabulary ({saved.path}) is {saved_kind}, but this "
                          f"task uses {kind}; use a new --workdir")
    if requested is not None and not same(requested, saved):
        raise ConfigError(f"{where} is not the vocabulary this run started with ({saved.path}, "
                          f"{saved.vocab_size} tokens; {where}: {requested.vocab_size} tokens, "
                          "other tokens or casing); a run keeps its vocabulary: use a new "
                          "--workdir for another one")
    return saved
