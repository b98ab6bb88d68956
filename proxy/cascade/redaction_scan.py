"""Where each secret pattern can begin in a text, found in one pass: the scanner that lets
:func:`proxy.cascade.redaction.redact` try a regex only where a match is possible.

Scanning every pattern over every tool result is the proxy's hottest loop, and almost no text
holds a secret, so each compiled pattern also gets a *plan*, read once from its parse tree: the
literals one of which begins every match (``sk-``, ``AKIA``, ``bearer``, ``password`` …;
lowercased when the pattern ignores case). :meth:`Scanner.find` finds every pattern's literals
in one pass of an Aho-Corasick automaton (``ahocorasick_rs``) over the text's lowercased bytes,
and :func:`candidates` keeps the exact-case hits of case-sensitive literals: the only places
where the pattern's regex is tried. A pattern with no such literal (a configured
``[0-9]{4}-[0-9]{4}``) has no plan's starts and runs as a plain ``subn``, and so does any
pattern whose literals are so frequent in a text that one scan in C is cheaper (``candidates``
gives up past its limit).

Why one automaton: a ``str.find`` pass per literal reads the text once per literal (there
are a few dozen), and a combined ``re`` alternation is slower still; the automaton reads it
once. :func:`candidates` then walks only the literals found, usually one or two, rather
than every plan's. The automaton's packed (SIMD) search holds at most :data:`MAX_LITERALS`
strings, and past that reads every text several times slower, so the literals go into as
many automata of at most that many as they need, in the order their patterns come: the
built-in patterns' literals fill the first (their set, not only its size, sets its speed),
and literals of later patterns (new rules, configured ones) cost one more small pass rather
than a slower first one.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import ahocorasick_rs

from proxy.cascade.literals import start_literals

__all__ = [
    "MAX_LITERALS",
    "Plan",
    "Scanner",
    "candidates",
    "fold",
    "pieces_holding",
    "plan_of",
    "scanner_for",
    "starts_of",
]


_DENSITY = 32  # past one candidate per this many characters, one subn scan is cheaper
_MAX_SCANNERS = 1024
MAX_LITERALS = 64  # the most strings an automaton's packed search holds

# Characters ``re`` matches to an ASCII letter ignoring case that ``str.lower`` does not lower
# to it (U+0130 even lowers to two characters, which would shift every later position).
_FOLD_FIRST = {0x130: "i", 0x131: "i", 0x17F: "s"}
_FOLD_FIRST_CHARS = tuple(map(chr, _FOLD_FIRST))
# Every non-ASCII character ``re`` matches to an ASCII letter ignoring case (the Kelvin sign
# too, which ``str.lower`` lowers to "k"); ``bytes.lower`` leaves them, so a text holding
# one is folded as a str.
_TWINS = (*_FOLD_FIRST_CHARS, "\u212a")


@dataclass(frozen=True, slots=True)
class Plan:
    """How to run one pattern: where its matches can begin, and what to replace."""

    starts: tuple[str, ...]  # every match begins with one of these; () = unknown: plain scan
    folded: bool  # ``starts`` are lowercase and are looked for in the folded text
    groups: tuple[str, ...]  # the ``secret…`` groups: replace only these
    # each start lowercased (as the automaton reports it) -> the exact-case starts to keep
    # among its hits (None: every hit, the plan being folded)
    keys: Mapping[str, tuple[str, ...] | None]


def plan_of(pattern: re.Pattern[str]) -> Plan:
    """How to run ``pattern`` (computed once per pattern sequence, in :func:`scanner`)."""
    groups = tuple(name for name in pattern.groupindex if name.startswith("secret"))
    starts, folded = start_literals(pattern)
    keys: dict[str, tuple[str, ...] | None] = {}
    if folded:  # already lowercase: every hit counts
        keys = dict.fromkeys(starts)
    else:  # ``AB`` and ``ab`` share the automaton's key ``ab``; each keeps its own hits
        for start in starts:
            if start.lower() == start.upper():  # no letter (``://``): every hit is exact
                keys[start] = None
                continue
            keys[start.lower()] = (*(keys.get(start.lower()) or ()), start)
    return Plan(starts, folded, groups, keys)


def fold(text: str) -> str:
    """Lowercase ``text``, keeping positions: wherever a case-insensitive pattern matches an
    ASCII literal, the result holds that literal in lowercase at the same position."""
    if not text.isascii() and any(ch in text for ch in _FOLD_FIRST_CHARS):
        text = text.translate(_FOLD_FIRST)
    return text.lower()


@dataclass(frozen=True, slots=True)
class Automaton:
    """At most :data:`MAX_LITERALS` literals (lowercased) and their leftmost-first search."""

    literals: tuple[str, ...]
    search: Any  # ahocorasick_rs.BytesAhoCorasick over the literals, in lowercased bytes
    inner: tuple[tuple[tuple[int, str, bytes], ...], ...]  # per literal: (offset, other, bytes)


@dataclass(frozen=True, slots=True)
class Scanner:
    """One sequence of patterns: their plans, and automata over all their start literals
    (lowercased, so they run over the folded text: a superset of every exact-case hit).

    Each automaton reports leftmost-first matches, which do not overlap: that search skips
    ahead to the bytes a literal can begin with, which an overlapping search cannot, and so
    reads large texts about twice as fast. Every start it cannot report lies inside a
    reported match, so ``inner`` lists, per literal, each (offset, literal) of the same
    automaton that can begin inside it, and :meth:`find` checks those few places.
    """

    plans: tuple[Plan, ...]
    literals: tuple[str, ...]  # in the order their patterns come
    automata: tuple[Automaton, ...]  # those literals, MAX_LITERALS at a time
    anchored: bool  # every pattern has start literals: a text without any has no match
    users: Mapping[str, tuple[int, ...]]  # each literal -> the patterns (indexes) it starts

    def active(self, found: Mapping[str, object]) -> set[int]:
        """The patterns one of whose literals ``found`` holds: the only ones worth trying."""
        out: set[int] = set()
        for literal in found:
            out.update(self.users[literal])
        return out

    def find(self, text: str) -> dict[str, list[int]]:
        """Ascending positions where each literal begins in ``fold(text)``, overlaps too.

        The automata read bytes lowercased by ``bytes.lower`` (ASCII letters only): the
        text's ASCII encoding, or else its UTF-8 encoding, whose byte offsets are turned into
        character positions at each hit (lone surrogates pass through). Either is a copy or
        two in C, where ``str.lower`` of non-ASCII text costs several times as much. Only a
        text holding one of the four characters ``re`` matches to an ASCII letter ignoring
        case goes through ``fold`` first.
        """
        if text.isascii():
            data, wide = text.encode("ascii").lower(), False
        else:
            if any(ch in text for ch in _TWINS):
                text = fold(text)
            data, wide = text.encode("utf-8", "surrogatepass").lower(), True
        found: dict[str, list[int]] = {}
        for automaton in self.automata:
            literals, inner = automaton.literals, automaton.inner
            byte = char = 0  # the last hit's byte offset and character position
            for index, start, _ in automaton.search.find_matches_as_indexes(data):
                if wide:  # a literal begins with an ASCII byte: the slice is whole characters
                    char += len(data[byte:start].decode("utf-8", "surrogatepass"))
                    byte = start
                else:
                    char = start
                found.setdefault(literals[index], []).append(char)
                for entry in inner[index]:  # ASCII literals: byte offsets are characters
                    if data.startswith(entry[2], start + entry[0]):
                        found.setdefault(entry[1], []).append(char + entry[0])
        return found


def _inner(literals: Sequence[str]) -> tuple[tuple[tuple[int, str, bytes], ...], ...]:
    """For each literal ``a``: every (offset, ``b``) where an occurrence of ``b`` can begin at
    that offset inside an occurrence of ``a`` (``b`` and the rest of ``a`` agree as far as
    both go), in offset order. ``b`` may be ``a`` itself at a later offset (``aa`` in
    ``aaa``), never at offset 0."""
    return tuple(
        tuple(
            (offset, b, b.encode())
            for offset in range(len(a))
            for b in literals
            if (offset or b != a) and (a[offset:].startswith(b) or b.startswith(a[offset:]))
        )
        for a in literals
    )


def _automaton(literals: tuple[str, ...]) -> Automaton:
    first = ahocorasick_rs.MatchKind.LeftmostFirst
    search = ahocorasick_rs.BytesAhoCorasick([s.encode() for s in literals], matchkind=first)
    return Automaton(literals, search, _inner(literals))


_SCANNERS: dict[int, tuple[Sequence[re.Pattern[str]], Scanner]] = {}


def scanner_for(patterns: Sequence[re.Pattern[str]]) -> Scanner:
    # Keyed by identity: ``compile_patterns`` hands out one cached tuple, and hashing compiled
    # patterns hashes their whole programs. The entry holds the sequence, so its id cannot be
    # reused while the entry lives.
    entry = _SCANNERS.get(id(patterns))
    if entry is not None and entry[0] is patterns:
        return entry[1]
    plans = tuple(plan_of(p) for p in patterns)
    # In the order the patterns come, each literal once.
    literals = tuple(dict.fromkeys(s.lower() for plan in plans for s in sorted(plan.starts)))
    scanner = Scanner(
        plans,
        literals,
        tuple(
            _automaton(tuple(sorted(literals[at : at + MAX_LITERALS])))
            for at in range(0, len(literals), MAX_LITERALS)
        ),
        bool(literals) and all(plan.starts for plan in plans),
        {lit: tuple(i for i, plan in enumerate(plans) if lit in plan.keys) for lit in literals},
    )
    if len(_SCANNERS) >= _MAX_SCANNERS:
        _SCANNERS.clear()
    _SCANNERS[id(patterns)] = (patterns, scanner)
    return scanner


def candidates(
    found: dict[str, list[int]], text: str, plan: Plan, limit: int | None = None
) -> list[int] | None:
    """Ascending positions where one of ``plan.starts`` begins in ``text`` (in its folded form
    when the plan is folded); None past ``limit`` (by default one per ``_DENSITY`` characters
    of ``text``: one ``subn`` scan in C is cheaper then). It walks the literals found (one or two in
    most texts), not the plan's starts (up to 32): this runs once per pattern per text."""
    if limit is None:
        limit = len(text) // _DENSITY + 16
    hits: list[int] = []
    for literal, at in found.items():
        if literal not in plan.keys:
            continue
        exact = plan.keys[literal]
        if exact is None:
            hits += at
        else:
            hits += [i for i in at if any(text.startswith(e, i) for e in exact)]
        if len(hits) > limit:
            return None
    hits.sort()
    return hits


def starts_of(patterns: Sequence[re.Pattern[str]]) -> Callable[[int, str], list[int] | None]:
    """Where the pattern of an index can begin matching a text, as ``redact`` plans it (None:
    anywhere); the text's literals are found once, and again only once it changed."""
    scanner = scanner_for(patterns)
    last: list[tuple[str, dict[str, list[int]]]] = []

    def starts(index: int, text: str) -> list[int] | None:
        plan = scanner.plans[index]
        if not plan.starts:
            return None
        if not last or last[0][0] is not text:
            last[:] = [(text, scanner.find(text))]
        return candidates(last[0][1], text, plan)

    return starts


def pieces_holding(pieces: Sequence[str], patterns: Sequence[re.Pattern[str]]) -> Sequence[int]:
    """The indexes of ``pieces`` a pattern can match in alone, ascending: of many, those
    in which one of its start literals begins, found in one pass over the pieces joined,
    rather than a ``redact`` call per piece (a tool output in thousands of small parts);
    none when no literal occurs, so the joined text holds no match either."""
    scanner = scanner_for(patterns)
    if len(pieces) < 2 or not scanner.anchored:
        return range(len(pieces))
    ends = list(accumulate(map(len, pieces)))
    found = scanner.find("".join(pieces))
    return sorted({bisect_right(ends, at) for hits in found.values() for at in hits})
