"""The texts a text predictor reads: every --FLAG given or (not both) one per line of a file,
else one per line of standard input (translate, bert_pretrain, finetune; causal_lm's prompts
likewise)."""

from __future__ import annotations

import sys

from train.config import ConfigError


def read_lines(given: list[str], path: str | None, *, what: str, flag: str, file_flag: str,
               stdin=None) -> list[str]:
    """The texts: `given` (from `flag`), else the lines of `path`, else of `stdin` (default
    sys.stdin, refused when it is a terminal). ConfigError for none at all or an empty one,
    naming where it came from and its number there."""
    if given and path:
        raise ConfigError(f"{flag} and {file_flag} {path}: give one of them (the other's "
                          f"{what}s would be left out)")
    if given:
        texts, where = list(given), flag
    elif path:
        try:
            with open(path, "rb") as f:  # local path: the user's input file
                data = f.read()
        except OSError as error:
            raise ConfigError(f"{file_flag} {path}: {error.strerror or error}") from error
        try:
            texts, where = data.decode("utf-8").splitlines(), path
        except UnicodeDecodeError as error:
            line = data[:error.start].count(b"\n") + 1
            raise ConfigError(f"{file_flag} {path}: line {line} is not UTF-8 text (byte "
                              f"{data[error.start]:#04x}); save the file as UTF-8") from None
    else:
        stdin = sys.stdin if stdin is None else stdin
        if stdin.isatty():
            raise ConfigError(f"no {what}: give {flag} TEXT, {file_flag} FILE, or {what}s on "
                              "standard input, one per line")
        texts, where = stdin.read().splitlines(), "standard input"
    if not texts:
        raise ConfigError(f"no {what} in {where}")
    for i, text in enumerate(texts):  # stdin decodes undecodable bytes to lone surrogates
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(f"{what} {i + 1} of {where} is not UTF-8 text; give UTF-8") from None
    empty = [i + 1 for i, text in enumerate(texts) if not text.strip()]
    if empty:
        raise ConfigError(f"{what} {empty[0]} of {where} is empty (remove the blank lines)")
    return texts
