"""Redaction of a text that arrives in pieces: a message's text parts, read as one text.

A tool that flushes its output in chunks, each chunk a content part, or a client that sends
a pasted key as two parts, can split a secret between parts: no part holds a whole match,
yet a model reads the parts one after the other and the store would keep both halves side
by side. :func:`redact_across` redacts the pieces as the one text they make (joined with
nothing between them) and hands each piece back its share, so the message keeps its parts.
Only parts side by side make one text (:func:`text_runs`): an image between two text parts
is what the model reads between them, and joining across it made ``password:`` above a
screenshot and ``Then`` below it one match.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import accumulate
from typing import Any

from proxy.cascade.secret_patterns import REDACTED

__all__ = ["part_texts", "replace_match", "redact_across", "rewritten", "text_runs"]


def replace_match(match: re.Match[str], groups: tuple[str, ...]) -> str:
    """What replaces ``match``: only its first ``secret…`` group that took part (the key
    name, the ``Bearer`` word around it are kept), else the whole match."""
    whole = match.group(0)
    for name in groups:
        if match.group(name) is not None:
            start, end = match.start(name) - match.start(), match.end(name) - match.start()
            return whole[:start] + REDACTED + whole[end:]
    return REDACTED


def _matches(
    pattern: re.Pattern[str], text: str, starts: list[int] | None
) -> Iterator[re.Match[str]]:
    """``pattern.finditer(text)``; with ``starts`` (ascending), tried only there, which finds
    the same matches when every match begins at one (``redaction._sub_at``'s argument)."""
    if starts is None:
        yield from pattern.finditer(text)
        return
    end = 0
    for at in starts:
        if at >= end and (match := pattern.match(text, at)) is not None:
            yield match
            end = match.end()


def redact_across(
    pieces: Sequence[str],
    patterns: Sequence[re.Pattern[str]],
    starts: Callable[[int, str], list[int] | None] | None = None,
) -> tuple[list[str], int]:
    """``pieces`` redacted as one text, each pattern's matches replaced in turn (as ``subn``
    does); returns the pieces and the count. A replacement goes to the piece its match
    begins in, so a piece wholly inside a match comes back empty, and the piece after the
    match keeps what follows it. ``starts(index, text)`` gives where the pattern of that
    index can begin matching (None: anywhere), so a large text is not scanned by each."""
    text, ends, total = "".join(pieces), list(accumulate(len(p) for p in pieces)), 0
    for index, pattern in enumerate(patterns):
        groups = tuple(name for name in pattern.groupindex if name.startswith("secret"))
        at = None if starts is None else starts(index, text)
        found = [
            (m.start(), m.end(), replace_match(m, groups)) for m in _matches(pattern, text, at)
        ]
        if not found:
            continue
        out: list[str] = []
        moved: list[int] = []
        shift = prev = j = 0
        for start, end, rep in found:
            while j < len(ends) and ends[j] <= start:  # a piece ending before the match
                moved.append(ends[j] + shift)
                j += 1
            while j < len(ends) and ends[j] < end:  # a piece ending inside it
                moved.append(start + shift + len(rep))
                j += 1
            out += (text[prev:start], rep)
            prev, shift = end, shift + len(rep) - (end - start)
        moved += [end + shift for end in ends[j:]]
        out.append(text[prev:])
        text, ends, total = "".join(out), moved, total + len(found)
    starts_at = [0, *ends[:-1]]
    return [text[a:b] for a, b in zip(starts_at, ends, strict=True)], total


def text_runs(places: Sequence[int]) -> list[list[int]]:
    """``places`` (ascending) in runs of consecutive ones: the text parts side by side, which
    read as one text; a part that is no text (an image, audio) ends one."""
    runs: list[list[int]] = []
    for i in places:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def part_texts(parts: Sequence[Any]) -> tuple[dict[int, str], dict[int, str]]:
    """Each part's text by its place, as ``text.part_text`` reads it whatever the role: a
    bare string, its ``text``, else its ``refusal`` (a lenient provider takes either in a
    user's or a tool's message, and the summary renders it); and the key of each text not
    under ``text`` (``""``: the part itself)."""
    texts: dict[int, str] = {}
    keys: dict[int, str] = {}
    for i, part in enumerate(parts):  # ``type`` first: isinstance of an ABC costs more
        if type(part) is dict or isinstance(part, Mapping):
            held = part.get("text")
            if not isinstance(held, str) and "refusal" in part:
                held, keys[i] = part["refusal"], "refusal"
        elif isinstance(part, str):
            held, keys[i] = part, ""
        else:
            continue
        if type(held) is str or isinstance(held, str):
            texts[i] = held
    return texts, keys


def rewritten(part: Any, key: str, text: str) -> Any:
    """``part`` with its text, under ``key`` (``""``: the part itself), as ``text``."""
    return text if key == "" else {**part, key: text}
