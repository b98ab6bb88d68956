"""The identifier ledger: a summary that loses no identifier of the folded span by name.

LLM summaries keep decisions well but drop most file paths, URLs and hashes. After the fast
model writes a briefing, the shell calls :func:`apply_ledger` with the folded span: every
identifier of the span (file paths, URLs, commit hashes, backtick-quoted code) that the model's
text does not contain verbatim is appended under ``## Files & State``, newest first, up to a
cap. Extraction is deterministic (regular expressions only), so the same span always yields
the same ledger. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from proxy.cascade.rounds import call_functions
from proxy.cascade.text import content_text
from proxy.cascade.types import Message

__all__ = [
    "LEDGER_HEADING",
    "LedgerResult",
    "apply_ledger",
    "extract_identifiers",
    "message_identifiers",
]

LEDGER_HEADING = "## Files & State"
_NONE = "(none)"

_URL = re.compile(r"\b(?:https?|ftp|wss?)://[^\s<>\"'`()\[\]{}]+")
_TRAILING = ".,;:!?'\""
_PATH = re.compile(r"(?<![\w/.:@~-])(?:~|\.{1,2})?/?(?:[\w.@+-]+/)+[\w.@+-]*")
_EXTS = (
    "py|pyi|js|mjs|cjs|ts|tsx|jsx|json|jsonl|yaml|yml|toml|md|rst|txt|sql|sh|bash|go|rs|"
    "c|h|cc|cpp|hpp|java|kt|rb|php|html|css|scss|cfg|ini|conf|lock|log|csv|xml|proto|"
    "ipynb|swift|cs|vue|svelte|tf|gradle|mk|env|pem|patch|diff"
)
_FILE = re.compile(rf"(?<![\w/.-])[\w-]+(?:\.[\w-]+)*\.(?:{_EXTS})(?![\w/-])")
_EXT_TAIL = re.compile(r"\.[A-Za-z0-9]{1,8}$")
_HASH = re.compile(r"(?<![\w-])[0-9a-f]{7,40}(?![\w-])")
_TICKED = re.compile(r"(?<!`)`([^`\n]{1,120})`(?!`)")


def _is_path(token: str) -> bool:
    """A slash-joined token that reads as a path, not prose such as ``and/or`` or ``1/2``."""
    parts = [p for p in token.strip("/").split("/") if p not in ("", ".", "..", "~")]
    if not parts or all(p.isdigit() for p in parts):
        return False
    rooted = token.startswith(("/", "~/", "./", "../"))
    return rooted or token.count("/") >= 2 or bool(_EXT_TAIL.search(parts[-1]))


def _is_hash(token: str) -> bool:
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def extract_identifiers(text: str) -> list[str]:
    """Identifiers of one text, in order of first appearance, each once.

    URLs first take their characters out of the text so their paths are not found again;
    a path's trailing sentence punctuation is not part of it.
    """
    found: list[tuple[int, str]] = []
    for m in _URL.finditer(text):
        found.append((m.start(), m.group().rstrip(_TRAILING)))
    rest = _URL.sub(lambda m: " " * len(m.group()), text)
    for m in _TICKED.finditer(rest):
        if (inner := m.group(1).strip()) and not inner.isdigit():
            found.append((m.start(1), inner))
    for m in _PATH.finditer(rest):
        token = m.group().rstrip(_TRAILING)
        if _is_path(token):
            found.append((m.start(), token))
    for m in _FILE.finditer(rest):
        found.append((m.start(), m.group()))
    for m in _HASH.finditer(rest):
        if _is_hash(m.group()):
            found.append((m.start(), m.group()))
    found.sort(key=lambda pair: pair[0])
    return list(dict.fromkeys(token for _, token in found if token))


def message_identifiers(m: Message) -> list[str]:
    """Identifiers of a message's text and of its calls' arguments: its tool calls' and a
    legacy ``function_call``'s (``rounds.call_functions``)."""
    texts = [content_text(m.get("content"), media=False)]
    texts += [str(fn.get("arguments") or "") for fn in call_functions(m)]
    return list(dict.fromkeys(i for t in texts for i in extract_identifiers(t)))


def _newest_first(span: Sequence[Message]) -> list[str]:
    out: dict[str, None] = {}
    for m in reversed(span):
        for ident in message_identifiers(m):
            out.setdefault(ident, None)
    return list(out)


@dataclass(frozen=True, slots=True)
class LedgerResult:
    """The briefing with the ledger appended, and its counts for the completed event."""

    summary: str
    kept: int  # identifiers of the span the model's text already holds verbatim
    added: int  # appended by the ledger
    dropped: int  # missing from the model's text but over the cap


def _append(summary: str, lines: Iterable[str]) -> str:
    """Append ``lines`` at the end of the ``## Files & State`` section (a lone ``(none)`` is
    replaced); a briefing without that heading gets it at the end."""
    block = "\n".join(lines)
    if not block:
        return summary
    head, sep, tail = summary.partition(LEDGER_HEADING + "\n")
    if not sep:
        return f"{summary.rstrip()}\n\n{LEDGER_HEADING}\n{block}"
    nxt = re.search(r"^## ", tail, flags=re.MULTILINE)
    body, after = (tail[: nxt.start()], tail[nxt.start() :]) if nxt else (tail, "")
    body = body.strip()
    body = block if body in ("", _NONE) else f"{body}\n{block}"
    return f"{head}{sep}{body}\n\n{after}" if after else f"{head}{sep}{body}"


def apply_ledger(summary: str, span: Sequence[Message], *, cap: int) -> LedgerResult:
    """Append the span's identifiers missing from ``summary``, newest first, at most ``cap``.

    An identifier counts as kept when the model's text holds it verbatim anywhere. Each added
    one is a list line quoted in backticks, exactly as it appeared in the span.
    """
    idents = _newest_first(span)
    missing = [i for i in idents if i not in summary]
    kept = len(idents) - len(missing)
    added = missing[: max(cap, 0)]
    text = _append(summary, (f"- `{i}`" for i in added))
    return LedgerResult(text, kept=kept, added=len(added), dropped=len(missing) - len(added))
