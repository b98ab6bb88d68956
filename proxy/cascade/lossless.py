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
- ``point_to_earlier``: a run of lines that an earlier tool result of the session also holds,
  consecutively, becomes a pointer naming that result (``pins.pin``) and line range. The
  longest such run is taken among the last ``MAX_OCCURRENCES`` places each line occurs.

The line transforms split lines at ``\\n`` or ``\\r\\n`` only (a form feed or U+2028 stays in its
line, as a reader counts); the rewritten text joins them with ``\\n`` (endings: in the spill).
"""

from __future__ import annotations

import functools
import json
import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from proxy.cascade.tables import may_tabulate, parse_json, tabulate_json, tabulate_value

__all__ = [
    "MAX_OCCURRENCES",
    "MIN_POINTER_LINES",
    "MIN_POINTER_CHARS",
    "EarlierLines",
    "lines_of",
    "line_set_of",
    "Compacted",
    "minify_json",
    "collapse_repeats",
    "point_to_earlier",
    "compact_text",
    "compacted_marker",
]

MIN_POINTER_LINES = 3
"""A pointer replaces at least this many lines: a shorter match is usually boilerplate."""

MIN_POINTER_CHARS = 120
"""...and at least this many characters, so a pointer is always much shorter than its lines."""

MAX_OCCURRENCES = 8
"""Places looked up per line (the latest ones): a file read again is usually the same lines
as a recent read, and a line found everywhere (``    return x``) stays cheap to look up."""

_MIN_REPEAT = 3
"""A run of identical lines is collapsed from this length on (two lines read fine as is)."""

_SEARCH_UP_TO = 8
"""Up to this many shared lines are found in a result by linear searches in C each; more, by
one pass over the result's lines."""

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


_MEMO_CHARS = 32_000  # ``lines_of`` memoises texts up to this long (a memory bound)


def lines_of(text: str) -> tuple[str, ...]:
    """``text``'s lines without their endings (``\\n`` or ``\\r\\n``: module docstring).

    An agent resends its whole history, so each request compares a new result with the same
    earlier results as the last one did; their lines are memoised (the latest few hundred
    texts up to ``_MEMO_CHARS`` long), so each is split once, not on every request."""
    return _split(text)[0]


def line_set_of(text: str) -> frozenset[str]:
    """The set of ``text``'s lines, memoised as ``lines_of`` is (``EarlierLines.places``)."""
    return _split(text)[1]


def _split(text: str) -> tuple[tuple[str, ...], frozenset[str]]:
    return _split_now(text) if len(text) > _MEMO_CHARS else _memo_split(text)


def _split_now(text: str) -> tuple[tuple[str, ...], frozenset[str]]:
    lines = (text.replace("\r\n", "\n") if "\r" in text else text).split("\n")  # no "\r": no copy
    if not text or text.endswith("\n"):
        lines.pop()  # as ``splitlines``: no empty line after the last ending
    return tuple(lines), frozenset(lines)


_memo_split = functools.lru_cache(maxsize=256)(_split_now)


@dataclass(frozen=True, slots=True)
class EarlierLines:
    """The lines of the session's earlier tool results, for ``point_to_earlier``.

    The lines of each result are kept so a match can be extended line by line, and their set
    so a result is tested for shared lines in one intersection; where a line occurs is looked
    up only for the lines of the result being compacted (``places``), so the earlier results
    are never indexed line by line in Python.
    """

    ids: tuple[str, ...] = ()  # the names pointers give the results (``pins.pin``)
    lines: tuple[tuple[str, ...], ...] = ()
    sets: tuple[frozenset[str], ...] = ()  # each result's lines as a set

    @classmethod
    def build(cls, results: Iterable[tuple[str, str]]) -> EarlierLines:
        """From (tool_call_id, original text) pairs, oldest first."""
        ids: list[str] = []
        lines: list[tuple[str, ...]] = []
        sets: list[frozenset[str]] = []
        for tool_call_id, text in results:
            if not tool_call_id or not text:
                continue
            ids.append(tool_call_id)
            lines.append(lines_of(text))
            sets.append(line_set_of(text))
        return cls(tuple(ids), tuple(lines), tuple(sets))

    def places(self, wanted: Iterable[str]) -> dict[str, list[tuple[int, int]]]:
        """The places (result index, line index) of each non-blank line of ``wanted`` in the
        earlier results: the latest ``MAX_OCCURRENCES`` of them, latest first; a line no
        earlier result holds is absent.

        Results are walked from the latest back; each is checked with one intersection of
        its line set with the lines still wanted (the smaller side is iterated: usually the
        new result's few lines) and searched only for the lines it shares. A line stops being
        wanted once it has ``MAX_OCCURRENCES`` places, so earlier results are never walked
        line by line, and a line found everywhere stops the search for it early."""
        want = set(filter(str.strip, wanted))  # the non-blank lines
        found: dict[str, list[tuple[int, int]]] = {}
        for k in range(len(self.lines) - 1, -1, -1):
            if not want:
                break
            common = want.intersection(self.sets[k])
            if not common:
                continue
            once, repeated = _positions_in(self.lines[k], self.sets[k], common)
            if once:
                lines = set(once)
                fresh = lines.difference(found)  # the usual case: one place, a first one
                found.update({line: [(k, once[line])] for line in fresh})
                for line in lines - fresh:
                    repeated[line] = [once[line]]
            for line, positions in repeated.items():  # positions latest first
                got = found.setdefault(line, [])
                got.extend((k, j) for j in positions[: MAX_OCCURRENCES - len(got)])
                if len(got) >= MAX_OCCURRENCES:
                    want.discard(line)
        return found

    def __bool__(self) -> bool:
        return bool(self.ids)


def _positions_in(
    split: tuple[str, ...], line_set: frozenset[str], common: set[str]
) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Where each line of ``common`` occurs in ``split`` (its set ``line_set``): the one
    position of each line found once, and the positions, latest first, of each line found
    more than once. A few lines are searched for in C (``tuple.index``); many are looked up
    in maps of first and last positions, built in C."""
    once: dict[str, int] = {}
    repeated: dict[str, list[int]] = {}
    if len(common) <= _SEARCH_UP_TO:
        for line in common:
            positions = _positions(split, line)
            if len(positions) == 1:
                once[line] = positions[0]
            else:
                repeated[line] = positions
        return once, repeated
    last = dict(zip(split, range(len(split)), strict=True))
    if len(line_set) == len(split):  # no line occurs twice
        return {line: last[line] for line in common}, repeated
    first = dict(zip(reversed(split), range(len(split) - 1, -1, -1), strict=True))
    for line in common:
        if first[line] == last[line]:
            once[line] = last[line]
        else:
            repeated[line] = _positions(split, line)
    return once, repeated


def _positions(split: tuple[str, ...], line: str) -> list[int]:
    """Every index of ``line`` in ``split``, latest first (searched in C)."""
    out: list[int] = []
    j = -1
    try:
        while True:
            j = split.index(line, j + 1)
            out.append(j)
    except ValueError:
        out.reverse()
        return out


def _pointer(count: int, tool_call_id: str, start: int, end: int) -> str:
    return f"[{count} lines: same as lines {start + 1}-{end} of tool result {tool_call_id}]"


def _longest_run(
    lines: Sequence[str], i: int, places: Sequence[tuple[int, int]], earlier: EarlierLines
) -> tuple[int, int, int]:
    """The longest run of ``lines`` from ``i`` that an earlier result holds from one of
    ``places`` (those of ``lines[i]``, latest first): (result, start line, length); the latest
    place wins a tie."""
    best = (0, 0, 0)
    for k, j in places:
        source = earlier.lines[k]
        n = 1
        while i + n < len(lines) and j + n < len(source) and lines[i + n] == source[j + n]:
            n += 1
        if n > best[2]:
            best = (k, j, n)
    return best


def point_to_earlier(lines: Sequence[str], earlier: EarlierLines) -> tuple[list[str], int]:
    """``lines`` with each run also found in an earlier result replaced by a pointer, and
    how many lines the pointers stand for. Runs are greedy, each the longest found from its
    first line among that line's places (``EarlierLines.places``, ``_longest_run``); one is
    replaced only from ``MIN_POINTER_LINES`` lines and ``MIN_POINTER_CHARS`` characters on."""
    where = earlier.places(lines) if earlier else {}
    if not where:  # no line of ``lines`` occurs earlier: the usual case for new output
        return list(lines), 0
    out: list[str] = []
    pointed = 0
    i = 0
    while i < len(lines):
        places = where.get(lines[i])
        if places is None:
            out.append(lines[i])
            i += 1
            continue
        k, j, n = _longest_run(lines, i, places, earlier)
        if (
            n >= MIN_POINTER_LINES
            and sum(len(x) + 1 for x in lines[i : i + n]) >= MIN_POINTER_CHARS
        ):
            out.append(_pointer(n, earlier.ids[k], j, j + n))
            pointed += n
            i += n
            continue
        out.append(lines[i])
        i += 1
    return out, pointed


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
