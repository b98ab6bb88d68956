"""Pointers to earlier tool results: a run of lines an earlier result of the session also
holds, consecutively, becomes a pointer naming that result (``pins.pin``) and line range.

The lossless ingest stage (``lossless.compact_text``) runs ``point_to_earlier`` on a new
result before collapsing its repeats; the pipeline keeps the session's earlier results as
``EarlierLines``. An agent rereads the same files and reruns the same commands, so a new
result often repeats an earlier one; the pointer keeps the prompt short while the original
stays readable through ``read_tool_output``. The longest run is taken among the last
``MAX_OCCURRENCES`` places each line occurs, so a line found everywhere stays cheap.

Lines are split at ``\\n`` or ``\\r\\n`` only (a form feed or U+2028 stays in its line, as a
reader counts).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "MAX_OCCURRENCES",
    "MIN_POINTER_LINES",
    "MIN_POINTER_CHARS",
    "EarlierLines",
    "lines_of",
    "line_set_of",
    "point_to_earlier",
]

MIN_POINTER_LINES = 3
"""A pointer replaces at least this many lines: a shorter match is usually boilerplate."""

MIN_POINTER_CHARS = 120
"""...and at least this many characters, so a pointer is always much shorter than its lines."""

MAX_OCCURRENCES = 8
"""Places looked up per line (the latest ones): a file read again is usually the same lines
as a recent read, and a line found everywhere (``    return x``) stays cheap to look up."""

_SEARCH_UP_TO = 8
"""Up to this many shared lines are found in a result by linear searches in C each; more, by
one pass over the result's lines."""

_MEMO_CHARS = 32_000
"""Texts up to this long have their lines memoised (``lines_of``): a bound on the memory."""


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
