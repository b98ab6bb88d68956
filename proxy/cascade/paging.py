"""Paging of a stored raw output: what ``read_tool_output`` (and the session API's
tool-output route) returns, one page of it or the lines that match a text.

A page is the stored text verbatim between a one-line header and, when more follows, a note
naming the next offset; header and note count toward the cap, so a page is never cut again
and pages joined by offset give back the text exactly. A grep lists matching lines with
their offsets, in linear time whatever the pattern: it runs in the proxy's one process, under
the interpreter's lock every tenant's requests share.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import ahocorasick_rs

__all__ = ["Matcher", "grep_matcher", "raw_output_page"]

_GREP_LINE_CHARS = 400
_GREP_CONTEXT = 150


def _header(id: str, start: int, end: int, total: int) -> str:
    return f"[read_tool_output id={id} chars {start}-{end} of {total}]\n"


def _next_note(id: str, offset: int) -> str:
    args = json.dumps({"id": id, "offset": offset})
    return f"\n[... more: read_tool_output({args}) ...]"


def raw_output_page(
    text: str,
    *,
    id: str = "",
    offset: int = 0,
    limit: int | None = None,
    grep: str | None = None,
    max_chars: int,
) -> tuple[str, int | None]:
    """What ``read_tool_output`` returns for a stored raw output: one page, or grep hits.

    Page mode returns ``text[a:b]`` verbatim after a one-line header
    ``[read_tool_output id=… chars a-b of N]``, where ``a = offset`` and ``b`` is bounded by
    ``limit`` and by the cap; when ``b < N`` a trailing note names the next offset. The cap
    counts header and note too, so a page is never longer than ``max_chars`` and can never be
    truncated again; pages concatenated by offset reproduce the text exactly.

    Grep mode (``grep`` set) lists the lines of ``text[offset:offset+limit]`` that contain
    the text, in any case, or one of its ``|``-separated alternatives (``grep_matcher``),
    each prefixed with the absolute character offset of what is shown; long lines show a
    window around the match.

    With the page, the offset the next page starts from: the end of the page, or of the
    text a grep searched, or the line of its first hit not shown; None at the text's end.
    """
    total = len(text)
    start = min(max(0, offset), total)
    if grep is not None and grep != "":
        end = total if limit is None or limit <= 0 else min(total, start + limit)
        page, next_at = _grep(text, id=id, pattern=grep, start=start, end=end, max_chars=max_chars)
        return page, next_at if next_at is not None else end if end < total else None
    overhead = len(_header(id, total, total, total)) + len(_next_note(id, total))
    cap = max(1, max_chars - overhead)
    want = cap if limit is None or limit <= 0 else min(limit, cap)
    end = min(total, start + want)
    page = _header(id, start, end, total) + text[start:end]
    if end < total:
        page += _next_note(id, end)
    return page, end if end < total else None


def _grep_line(line: str, line_start: int, match: tuple[int, int]) -> str:
    if len(line) <= _GREP_LINE_CHARS:
        return f"{line_start}: {line}"
    a = max(0, match[0] - _GREP_CONTEXT)
    b = min(len(line), match[1] + _GREP_CONTEXT)
    return f"{line_start + a}: …{line[a:b]}…"


Matcher = Callable[[str], "tuple[int, int] | None"]


def grep_matcher(pattern: str) -> Matcher:
    """``pattern`` as literal text, any case, with ``|`` between alternatives; the matcher
    gives a line's first match (start, end), longest first, or None.

    Linear time in the pattern and the line, whatever either holds: it runs in the proxy's
    one process, and the pattern is the model's (or an API caller's). A regex would
    backtrack on nested repeats or take time in text x alternatives; one Aho-Corasick
    automaton over the lowercased alternatives runs over the lowercased line instead (``İ``
    taken as ``i`` on both sides first: it alone lowercases to two characters, which would
    move every later position off the line's own). The automaton is a contiguous NFA: the
    library's DFA, its default for few alternatives, is built in time in the pattern's
    length x the alphabet, so one long alternative would stall every tenant before the
    first line is read.
    """
    alternatives = sorted({_fold(p) for p in pattern.split("|") if p}) or [_fold(pattern)]
    if alternatives == [""]:
        return lambda line: (0, 0)
    automaton = ahocorasick_rs.AhoCorasick(
        alternatives,
        matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_LONGEST,
        implementation=ahocorasick_rs.Implementation.ContiguousNFA,
    )

    longest = max(len(p) for p in alternatives)
    step = max(_GREP_WINDOW, longest)

    def first(line: str) -> tuple[int, int] | None:
        # The automaton lists every hit of what it is given; a line is given a window at
        # a time, each reaching a longest alternative past its end, so a hit starting in
        # it is whole there, and the first window with one gives the line's first.
        low = _fold(line)
        for at in range(0, len(low) or 1, step):
            found = automaton.find_matches_as_indexes(low[at : at + step + longest - 1])
            if found and found[0][1] < step:
                return (at + found[0][1], at + found[0][2])
        return None

    return first


def _fold(text: str) -> str:
    """``text`` lowercased, each character to one: positions in it are the text's."""
    return text.translate(_ONE_CHAR).lower()


_ONE_CHAR = {0x130: "i"}
"""Characters ``str.lower`` makes two of, each to the one it begins with."""


_GREP_WINDOW = 4096
"""The characters of a line the matcher searches at once: its memory is in this, not in the
line's hits, which one long line (minified JSON) can hold millions of."""


_GREP_PATTERN_SHOWN = 200
"""The most of a grep's text its page quotes: the page stays within the cap however long."""


def _grep(
    text: str, *, id: str, pattern: str, start: int, end: int, max_chars: int
) -> tuple[str, int | None]:
    """The matching lines of ``text[start:end]`` within ``max_chars``; when some do not fit,
    a note names the offset where the first of them starts, so a caller pages on from there
    and sees each line once. The first is always shown (a window around its match when its
    row does not fit), so that offset is past it."""
    match = grep_matcher(pattern)
    shown: list[str] = []
    used = 0
    matched = 0
    next_at: int | None = None
    quoted = repr(
        pattern if len(pattern) <= _GREP_PATTERN_SHOWN else pattern[:_GREP_PATTERN_SHOWN] + "…"
    )
    budget = max(0, max_chars - 300 - len(id) - len(quoted))
    pos = start
    for line in text[start:end].splitlines(keepends=True):
        body = line.rstrip("\r\n")
        hit = match(body)
        if hit is not None:
            matched += 1
            row = _grep_line(body, pos, hit)
            if next_at is None and used + len(row) + 1 > budget and shown:
                next_at = pos
            elif next_at is None and used + len(row) + 1 > budget:  # the first hit: a window
                half = (max(budget, 60) - len(f"{pos + len(body)}: ……") - hit[1] + hit[0]) // 2
                a, b = max(0, hit[0] - max(0, half)), min(len(body), hit[1] + max(0, half))
                row = f"{pos + a}: {'…' * (a > 0)}{body[a:b]}{'…' * (b < len(body))}"
            if next_at is None:
                shown.append(row)
                used += len(row) + 1
        pos += len(line)
    head = (
        f"[read_tool_output id={id} grep={quoted} chars {start}-{end} of {len(text)}: "
        f"{matched} matching lines]\n"
    )
    out = head + "\n".join(shown)
    if next_at is not None:
        out += (
            f"\n[... {matched - len(shown)} more matching lines not shown, the next from "
            f"offset {next_at}: narrow the pattern, or call again with offset {next_at} ...]"
        )
    return out, next_at
