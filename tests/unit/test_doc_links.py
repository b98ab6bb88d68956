"""The documents' links and the files they name resolve: a renamed module, test or heading
leaves a link or a path in README or docs/ pointing nowhere, which only a reader would find."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    ROOT / "RELIABILITY.md",
    ROOT / "bench" / "RESULTS.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
LOGS = {ROOT / "docs" / "perf.md"}
"""A record of runs and of what was tried and dropped, whose paths may be gone since."""
EXAMPLES = {"proxy/cascade/note.py", "tests/unit/cascade/test_note.py"}
"""docs/architecture.md's stage to add, which the walk-through creates."""


def _anchors(document: Path) -> set[str]:
    """GitHub's anchor of each heading: lower case, punctuation but ``-`` and ``_`` left out,
    blanks as ``-``, a repeated one numbered."""
    seen: dict[str, int] = {}
    for line in document.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"#+\s+(.*)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading[1].strip().lower()).replace(" ", "-")
            seen[slug] = seen.get(slug, -1) + 1
            if seen[slug]:
                seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


def _prose(document: Path) -> str:
    """A document without its fenced code blocks."""
    return re.sub(r"```.*?```", "", document.read_text(encoding="utf-8"), flags=re.S)


_LINK = r"\]\(([^)\s]+)\)"
_PATH = r"`((?:proxy|tests|bench|scripts|config|docs|migrations|\.ci)/[\w./*-]+)"


def test_the_patterns_read_readmes_links_anchors_and_paths() -> None:
    """The checks below pass on a document they find nothing in: a pattern that stopped
    matching would leave them checking nothing."""
    links = re.findall(_LINK, _prose(ROOT / "README.md"))
    assert len(links) >= 10 and len([link for link in links if "#" in link]) >= 5
    assert len(re.findall(_PATH, _prose(ROOT / "README.md"))) >= 40


@pytest.mark.parametrize("document", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(document: Path) -> None:
    broken = []
    for link in re.findall(_LINK, _prose(document)):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = link.partition("#")
        target = (document.parent / path).resolve() if path else document
        if (
            not target.exists()
            or anchor
            and target.suffix == ".md"
            and anchor not in _anchors(target)
        ):
            broken.append(link)
    assert broken == []


@pytest.mark.parametrize(
    "document", [d for d in DOCS if d not in LOGS], ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_path_of_the_checkout_named_exists(document: Path) -> None:
    named = re.findall(_PATH, _prose(document))
    missing = [p for p in named if p not in EXAMPLES and not list(ROOT.glob(p.rstrip("/")))]
    assert missing == []


_TESTS = [*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("bench/tests/test_*.py")]


def _defines(module: str, test: str) -> bool:
    """Whether a test module of that name (there may be several, in other folders) exists,
    and defines ``test`` when one is named."""
    return any(
        path.name == module
        and (not test or re.search(rf"def {test}\b", path.read_text(encoding="utf-8")))
        for path in _TESTS
    )


def test_every_test_named_without_its_folder_exists() -> None:
    """docs/design-conformance.md and RELIABILITY.md cite a test as ``test_x.py`` or
    ``test_x.py::test_y``, with no folder the check above reads."""
    named = {
        (module, test, document.name)
        for document in DOCS
        if document not in LOGS
        for module, test in re.findall(r"(?<![\w/])(test_\w+\.py)(?:::(\w+))?", _prose(document))
    }
    assert len(named) >= 60
    assert [n for n in named if not _defines(*n[:2])] == []
