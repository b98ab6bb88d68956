"""Lossless compaction of a new tool result at ingestion: smaller text, original kept.

A result is rewritten once, when it arrives, and never again, so the prompt prefix (and the
provider's cache) stays the same on every later step. Each transform is pure and keeps every
byte recoverable: the original is spilled for ``read_tool_output`` exactly as truncation
spills it, and the marker says so. The transforms:

- ``minify_json``: whitespace outside strings removed from a text that parses as JSON.
  Number, string and key tokens are kept as written (no re-serialisation, so ``1.10``,
  ``1e400`` or a 30-digit integer stay what they were), and key order and duplicates too.
  The text is parsed once for its tokens (``tables.parse_json``), only when the tables may
  apply, and that value is their input.
- ``tables.tabulate_json``: arrays of objects written as a header plus a row per object,
  the rest minified; taken instead of ``minify_json`` when it is shorter.
- ``collapse_repeats``: a run of identical consecutive lines becomes the line plus a count.
- ``pointers.point_to_earlier``: a run of lines that an earlier tool result of the session
  also holds, consecutively, becomes a pointer naming that result (``pins.pin``) and line
  range.

The line transforms split lines at ``\\n`` or ``\\r\\n`` only (a form feed or U+2028 stays in its
line, as a reader counts); the rewritten text joins them with ``\\n`` (endings: in the spill).
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from proxy.cascade.pointers import EarlierLines, lines_of, point_to_earlier
from proxy.cascade.tables import may_tabulate, parse_json, tabulate_json, tabulate_value

__all__ = [
    "Compacted",
    "minify_json",
    "collapse_repeats",
    "compact_text",
    "compacted_marker",
    "is_compacted_from",
]

_MIN_REPEAT = 3
"""A run of identical lines is collapsed from this length on (two lines read fine as is)."""

_JSON_TOKENS = re.compile(r'[ \t\n\r]*("[^"\\]*(?:\\.[^"\\]*)*"|[^" \t\n\r]+)', re.DOTALL)
"""Whitespace, then a JSON string or a run of characters that are neither whitespace nor a
quote (the group). In a text that parses as JSON, the matches cover it all and the groups
are exactly what is not whitespace outside strings, so joining them (in C, no call per token)
minifies it; the whitespace is taken inside each match, not skipped one position at a time."""


def _parsed(text: str) -> tuple[bool, Any]:
    """(True, the value) when ``text`` parses (``tables.parse_json``), else (False, None)."""
    try:
        return True, parse_json(text)
    except (ValueError, RecursionError):
        return False, None


def _is_json(text: str) -> bool:
    """Whether ``text`` parses as JSON (``_parsed``), asked of orjson first: it parses in
    native code, and what it accepts (RFC 8259 JSON) the Python parser accepts too; what it
    refuses (``NaN``, ``Infinity``, lone surrogate escapes, nesting past 1024) goes to
    ``_parsed``."""
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return _parsed(text)[0]
    return True


def _minified(stripped: str, text: str) -> str | None:
    """``stripped`` (``text`` stripped, and parsed as JSON) without whitespace outside
    strings; None when that is ``text`` itself. Tokens are kept as written: the join only
    drops whitespace between them, so the result parses to the same tokens."""
    minified = "".join(_JSON_TOKENS.findall(stripped))
    return None if minified == text else minified


def minify_json(text: str) -> str | None:
    """``text`` without whitespace outside strings, when it is a JSON object or array (so it
    re-parses to the same tokens); None otherwise (not JSON, a scalar, nothing to do). It is
    parsed first: what only opens like JSON fails at its first token."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{" or not _is_json(text):
        return None
    return _minified(stripped, text)


def collapse_repeats(lines: Sequence[str]) -> tuple[list[str], int]:
    """``lines`` with each run of at least three identical lines kept once, followed by
    ``[previous line repeated N more times]``; and how many lines were folded away."""
    if not any(map(operator.eq, lines, lines[1:])):  # no line equals the next (tested in C)
        return list(lines), 0
    out: list[str] = []
    folded = 0
    i = 0
    while i < len(lines):
        n = 1
        while i + n < len(lines) and lines[i + n] == lines[i]:
            n += 1
        out.append(lines[i])
        if n >= _MIN_REPEAT:
            out.append(f"[previous line repeated {n - 1} more times]")
            folded += n - 1
        else:
            out.extend(lines[i + 1 : i + n])
        i += n
    return out, folded


@dataclass(frozen=True, slots=True)
class Compacted:
    """A compacted text and what each transform did (for the event and the replay)."""

    text: str
    json_minified: bool = False
    lines_collapsed: int = 0
    lines_pointed: int = 0
    json_tables: int = 0

    @property
    def how(self) -> str:
        parts = []
        if self.json_minified:
            parts.append("JSON minified")
        if self.json_tables:
            parts.append(f"{self.json_tables} arrays of objects as tables")
        if self.lines_collapsed:
            parts.append(f"{self.lines_collapsed} repeated lines collapsed")
        if self.lines_pointed:
            parts.append(f"{self.lines_pointed} lines pointed to earlier results")
        return ", ".join(parts)


def _compact_json(text: str, stripped: str) -> Compacted | None:
    """``compact_text`` of a text that opens like a JSON object or array: minified, or
    tabulated when that is shorter; None when neither applies.

    Whether it parses is asked first (``_is_json``: output that only opens like JSON,
    ``[INFO] ...``, fails at its first token, before any pass over it all). The Python parse
    that keeps tokens as written runs once, only when the tables may apply, and its value is
    their input. A text that does not parse may still be tabulated when it is surrounded by
    whitespace JSON does not allow (``tabulate_json`` parses the stripped text), as before."""
    tabular: tuple[str, int] | None = None
    minified: str | None = None
    if _is_json(text):
        minified = _minified(stripped, text)
        if may_tabulate(stripped):
            ok, value = _parsed(text)
            tabular = tabulate_value(value, len(stripped)) if ok else None
    elif stripped != text.strip(" \t\n\r"):  # surrounded by whitespace JSON does not allow
        tabular = tabulate_json(text)
    if tabular is not None and (minified is None or len(tabular[0]) < len(minified)):
        return Compacted(tabular[0], json_minified=True, json_tables=tabular[1])
    if minified is not None:
        return Compacted(minified, json_minified=True)
    return None


def compact_text(text: str, earlier: EarlierLines = EarlierLines()) -> Compacted | None:
    """The smallest lossless rewrite of ``text`` these transforms give, or None when none
    applies. JSON (after a byte order mark, kept: a parser refuses it, a reader does not) is
    minified, or tabulated when shorter (its lines repeat nothing worth a pointer); other
    text goes through the pointer pass first (it removes whole runs), then the collapse."""
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    stripped = text[len(bom) :].strip()
    if stripped[:1] in ("[", "{"):
        done = _compact_json(text[len(bom) :], stripped)
        if done is not None:
            return replace(done, text=bom + done.text) if bom else done
    lines = lines_of(text)  # memoised: the next result's ``EarlierLines`` splits it again
    pointed_lines, pointed = point_to_earlier(lines, earlier)
    collapsed_lines, collapsed = collapse_repeats(pointed_lines)
    if not pointed and not collapsed:
        return None
    return Compacted("\n".join(collapsed_lines), lines_collapsed=collapsed, lines_pointed=pointed)


def compacted_marker(tool_call_id: str, original_chars: int, how: str) -> str:
    """The line put before a compacted result: what was done, and how to read the original."""
    args = json.dumps({"id": tool_call_id})
    return (
        f"[compacted losslessly from {original_chars} chars ({how}); the exact original: "
        f"read_tool_output({args})]\n"
    )


_COMPACTED_MARKER = re.compile(
    r"\[compacted losslessly from (\d+) chars \((.*)\); the exact original: "
)
"""The start of :func:`compacted_marker`'s line; its group 2 is what was done (``how``)."""


def is_compacted_from(text: str, raw: str, handle: str) -> bool:
    """Whether ``text`` is ``raw`` compacted at ingestion under ``handle``: its first line
    is the marker :func:`compacted_marker` writes for ``raw``, and the rest is what
    ``compact_text`` makes of ``raw``. A pointer names lines of the results before it,
    which are not at hand here: with pointers the marker alone (handle, length, what was
    done) ties the text to ``raw``."""
    first, newline, rest = text.partition("\n")
    found = _COMPACTED_MARKER.match(first)
    if (
        not newline
        or found is None
        or first + newline != compacted_marker(handle, len(raw), found[2])
    ):
        return False
    if "pointed to earlier results" in found[2]:
        return True
    done = compact_text(raw)
    return done is not None and done.text == rest
