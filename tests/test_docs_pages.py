"""The README stays the newcomer's page (at most 250 lines, the rest in docs/), and what the pages
point at is there: every relative link's file and heading, every repository path they name.
(The commands they show: tests/test_docs_commands.py; their tables: tests/test_tables.py.)"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_LINES = 250
LINK = re.compile(r"\]\(([^)\s]+)\)")
# `models/vit.py`, `configs/bert/finetune.py:task=spam`, `notebooks/results/`: a path in the
# repository; one holding a placeholder (<sweep>, NAME, DIR, STEP, BUCKET, *) is a pattern.
REPO_PATH = re.compile(r"`((?:models|train|data|configs|tests|notebooks|benchmarks|docs)/[^`\s]*)`")
PATTERN = re.compile(r"[<*]|NAME|DIR|STEP|BUCKET")


def heading_anchor(heading: str) -> str:
    """The anchor a Markdown heading gets on the repository page: lower case, punctuation other
    than '-' and '_' dropped, spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_references(page: Path) -> list[str]:
    """What `page` links or names that is not there, one line each."""
    text, broken = page.read_text(), []
    for link in LINK.findall(text):
        if re.match(r"[a-z]+://|mailto:", link):
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target) if target else page
        if not path.exists():
            broken.append(f"{page.name}: link {link}: no {path.relative_to(REPO.parent)}")
        elif anchor and path.suffix == ".md":
            anchors = {heading_anchor(line.lstrip("#")) for line in path.read_text().splitlines()
                       if line.startswith("#")}
            if anchor not in anchors:
                broken.append(f"{page.name}: link {link}: no heading #{anchor} in {path.name}")
    for name in REPO_PATH.findall(text):
        path = name.split(":")[0]
        if not PATTERN.search(path) and not (REPO / path).exists():
            broken.append(f"{page.name}: names {path}, which is not in the repository")
    return broken


def test_the_readme_is_at_most_250_lines():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= README_LINES, (f"README.md has {lines} lines: it is the newcomer's page (at "
                                   f"most {README_LINES}); move the details to a docs/ page")


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_what_a_page_links_and_names_is_there(page):
    assert broken_references(page) == []


def test_a_broken_link_anchor_or_path_is_named(tmp_path, monkeypatch):
    """The check has teeth: a page with a link to a missing file, to a missing heading, or
    naming a file that is not in the repository fails it."""
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "vit.py").write_text("")
    (tmp_path / "docs" / "cli.md").write_text("# The command line\n\n## Reusing a workdir\n")
    page = tmp_path / "README.md"
    page.write_text("[cli](docs/cli.md#reusing-a-workdir), `models/vit.py`, "
                    "`configs/ablations/<sweep>.py`\n")
    assert broken_references(page) == []
    page.write_text("[gone](docs/gone.md) [anchor](docs/cli.md#resuming) `models/bert.py`\n")
    assert broken_references(page) == [
        "README.md: link docs/gone.md: no " + str((tmp_path / "docs" / "gone.md")
                                                 .relative_to(tmp_path.parent)),
        "README.md: link docs/cli.md#resuming: no heading #resuming in cli.md",
        "README.md: names models/bert.py, which is not in the repository"]
