"""Secret redaction: replace credentials in text before it is stored, spilled or forwarded.

Every pattern is built to run in linear time on multi-megabyte tool output: each starts with a
literal or a short keyword, and every quantifier is bounded, so no input can make the engine
backtrack catastrophically. A pattern with a named group whose name starts with ``secret``
(``secret``, ``secret2`` …) keeps the surrounding text (the key name, the ``Bearer`` word) and
replaces only that group; any other match is replaced whole. Replacements are
:data:`REDACTED`, which no pattern matches again, so redaction is idempotent.

Scanning every pattern over every tool result is the proxy's hottest loop, and almost no text
holds a secret, so each compiled pattern also gets a *plan*, read once from its parse tree: the
literals one of which begins every match (``sk-``, ``AKIA``, ``bearer``, ``password`` …;
lowercased when the pattern ignores case). :func:`redact` finds every pattern's literals in one
pass of an Aho-Corasick automaton (``ahocorasick_rs``) over the text's lowercased bytes, keeps
the exact-case hits of case-sensitive literals, and tries each regex only where one of its
literals begins. That is exactly what ``subn`` would have matched, since no match can begin
anywhere else, so the result is identical (the unit tests prove it against the plain loop). A
pattern with no such literal (a configured ``[0-9]{4}-[0-9]{4}``) runs as a plain ``subn``, and
so does any pattern whose literals are so frequent in a text that one scan in C is cheaper.
When every pattern has literals and none occurs (most texts), no regex runs at all.

Why one automaton: a ``str.find`` pass per literal reads the text once per literal (there
are a few dozen), and a combined ``re`` alternation is slower still; the automaton reads it
once. :func:`_candidates` then walks only the literals found, usually one or two, rather
than every plan's. ``python -m bench.redaction_speed`` compares :func:`redact` with the
plain loop; docs/perf.md has the figures.
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import ahocorasick_rs

from proxy.cascade.literals import start_literals
from proxy.cascade.redaction_parts import (
    part_texts,
    redact_across,
    replace_match,
    rewritten,
    text_runs,
)
from proxy.cascade.secret_patterns import DEFAULT_PATTERNS, REDACTED
from proxy.cascade.types import Message
from proxy.config_context import RedactionConfig

__all__ = [
    "REDACTED",
    "DEFAULT_PATTERNS",
    "compile_patterns",
    "patterns_of",
    "redact",
    "redact_message",
]


_DENSITY = 32  # past one candidate per this many characters, one subn scan is cheaper
_MAX_SCANNERS = 1024

# Characters ``re`` matches to an ASCII letter ignoring case that ``str.lower`` does not lower
# to it (U+0130 even lowers to two characters, which would shift every later position).
_FOLD_FIRST = {0x130: "i", 0x131: "i", 0x17F: "s"}
_FOLD_FIRST_CHARS = tuple(map(chr, _FOLD_FIRST))
# Every non-ASCII character ``re`` matches to an ASCII letter ignoring case (the Kelvin sign
# too, which ``str.lower`` lowers to "k"); ``bytes.lower`` leaves them, so a text holding
# one is folded as a str.
_TWINS = (*_FOLD_FIRST_CHARS, "\u212a")


@dataclass(frozen=True, slots=True)
class _Plan:
    """How to run one pattern: where its matches can begin, and what to replace."""

    starts: tuple[str, ...]  # every match begins with one of these; () = unknown: plain scan
    folded: bool  # ``starts`` are lowercase and are looked for in the folded text
    groups: tuple[str, ...]  # the ``secret…`` groups: replace only these
    # each start lowercased (as the automaton reports it) -> the exact-case starts to keep
    # among its hits (None: every hit, the plan being folded)
    keys: Mapping[str, tuple[str, ...] | None]


@functools.lru_cache(maxsize=64)
def _compile(patterns: tuple[str, ...], use_defaults: bool) -> tuple[re.Pattern[str], ...]:
    compiled: list[re.Pattern[str]] = []
    sources = (DEFAULT_PATTERNS if use_defaults else ()) + patterns
    for source in sources:
        try:
            compiled.append(re.compile(source))
        except re.error as exc:
            raise ValueError(f"invalid redaction pattern {source!r}: {exc}") from exc
    return tuple(compiled)


def compile_patterns(
    patterns: Sequence[str], *, use_defaults: bool = True
) -> tuple[re.Pattern[str], ...]:
    """Compile configured patterns (after :data:`DEFAULT_PATTERNS` unless ``use_defaults`` is off).

    Cached per distinct pattern tuple, so calling it on every request costs a dict lookup.
    An invalid regex raises ``ValueError`` naming the pattern and the reason.
    """
    return _compile(tuple(patterns), use_defaults)


def patterns_of(redaction: RedactionConfig) -> tuple[re.Pattern[str], ...]:
    """An agent's patterns as its ``context.redaction`` gives them (none when it is off)."""
    if not redaction.enabled:
        return ()
    return compile_patterns(redaction.patterns, use_defaults=redaction.default_patterns)


def _plan(pattern: re.Pattern[str]) -> _Plan:
    """How to run ``pattern`` (computed once per pattern sequence, in :func:`_scanner`)."""
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
    return _Plan(starts, folded, groups, keys)


def _fold(text: str) -> str:
    """Lowercase ``text``, keeping positions: wherever a case-insensitive pattern matches an
    ASCII literal, the result holds that literal in lowercase at the same position."""
    if not text.isascii() and any(ch in text for ch in _FOLD_FIRST_CHARS):
        text = text.translate(_FOLD_FIRST)
    return text.lower()


@dataclass(frozen=True, slots=True)
class _Scanner:
    """One sequence of patterns: their plans, and one automaton over all their start literals
    (lowercased, so it runs over the folded text: a superset of every exact-case hit).

    The automaton reports leftmost-first matches, which do not overlap: that search skips
    ahead to the bytes a literal can begin with, which an overlapping search cannot, and so
    reads large texts about twice as fast. Every start it cannot report lies inside a
    reported match, so ``inner`` lists, per literal, each
    (offset, literal) that can begin inside it, and :meth:`find` checks those few places.
    """

    plans: tuple[_Plan, ...]
    literals: tuple[str, ...]
    ascii: Any  # ahocorasick_rs.BytesAhoCorasick over the lowercased bytes of a text
    inner: tuple[tuple[tuple[int, str, bytes], ...], ...]  # per literal: (offset, other, bytes)
    anchored: bool  # every pattern has start literals: a text without any has no match
    users: Mapping[str, tuple[int, ...]]  # each literal -> the patterns (indexes) it starts

    def active(self, found: Mapping[str, object]) -> set[int]:
        """The patterns one of whose literals ``found`` holds: the only ones worth trying."""
        out: set[int] = set()
        for literal in found:
            out.update(self.users[literal])
        return out

    def find(self, text: str) -> dict[str, list[int]]:
        """Ascending positions where each literal begins in ``_fold(text)``, overlaps too.

        The automaton reads bytes lowercased by ``bytes.lower`` (ASCII letters only): the
        text's ASCII encoding, or else its UTF-8 encoding, whose byte offsets are turned into
        character positions at each hit (lone surrogates pass through). Either is a copy or
        two in C, where ``str.lower`` of non-ASCII text costs several times as much. Only a
        text holding one of the four characters ``re`` matches to an ASCII letter ignoring
        case goes through ``_fold`` first.
        """
        if text.isascii():
            data, wide = text.encode("ascii").lower(), False
        else:
            if any(ch in text for ch in _TWINS):
                text = _fold(text)
            data, wide = text.encode("utf-8", "surrogatepass").lower(), True
        matches = self.ascii.find_matches_as_indexes(data)
        found: dict[str, list[int]] = {}
        byte = char = 0  # the last hit's byte offset and character position
        for index, start, _ in matches:
            if wide:  # a literal begins with an ASCII byte, so the slice is whole characters
                char += len(data[byte:start].decode("utf-8", "surrogatepass"))
                byte = start
            else:
                char = start
            found.setdefault(self.literals[index], []).append(char)
            for entry in self.inner[index]:  # ASCII literals: byte offsets are characters
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


_SCANNERS: dict[int, tuple[Sequence[re.Pattern[str]], _Scanner]] = {}


def _scanner(patterns: Sequence[re.Pattern[str]]) -> _Scanner:
    # Keyed by identity: ``compile_patterns`` hands out one cached tuple, and hashing compiled
    # patterns hashes their whole programs. The entry holds the sequence, so its id cannot be
    # reused while the entry lives.
    entry = _SCANNERS.get(id(patterns))
    if entry is not None and entry[0] is patterns:
        return entry[1]
    plans = tuple(_plan(p) for p in patterns)
    literals = tuple(sorted({s.lower() for plan in plans for s in plan.starts}))
    first = ahocorasick_rs.MatchKind.LeftmostFirst
    scanner = _Scanner(
        plans,
        literals,
        ahocorasick_rs.BytesAhoCorasick([s.encode() for s in literals], matchkind=first)
        if literals
        else None,
        _inner(literals),
        bool(literals) and all(plan.starts for plan in plans),
        {lit: tuple(i for i, plan in enumerate(plans) if lit in plan.keys) for lit in literals},
    )
    if len(_SCANNERS) >= _MAX_SCANNERS:
        _SCANNERS.clear()
    _SCANNERS[id(patterns)] = (patterns, scanner)
    return scanner


def _candidates(
    found: dict[str, list[int]], text: str, plan: _Plan, limit: int
) -> list[int] | None:
    """Ascending positions where one of ``plan.starts`` begins in ``text`` (in its folded form
    when the plan is folded); None past ``limit``. It walks the literals found (one or two in
    most texts), not the plan's starts (up to 32): this runs once per pattern per text."""
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


def _sub_at(
    pattern: re.Pattern[str], text: str, hits: list[int], repl: Callable[[re.Match[str]], str]
) -> tuple[str, int]:
    """``pattern.subn(repl, text)``, trying only the positions in ``hits``.

    The same result whenever every match begins at a hit: ``subn`` takes the leftmost match
    at or after the end of the previous one, and ``match`` at a position is the very attempt
    ``subn`` makes there (lookbehinds still see the text before it). No match is empty (each
    begins with a non-empty literal), so the empty-match rules never come into play.
    """
    pieces: list[str] = []
    end = 0
    for at in hits:
        if at < end:
            continue
        match = pattern.match(text, at)
        if match is not None:
            pieces += (text[end:at], repl(match))
            end = match.end()
    if not pieces:
        return text, 0
    pieces.append(text[end:])
    return "".join(pieces), len(pieces) // 2


def redact(text: str, patterns: Sequence[re.Pattern[str]]) -> tuple[str, int]:
    """Replace every match of every pattern with :data:`REDACTED`; return (text, count).

    Patterns run in order over the output of the previous one. Text without any match is
    returned as the same object (callers can skip rewriting a message that did not change).
    The result is exactly that of each pattern's ``subn`` in turn; a pattern is only tried
    where one of its start literals occurs (see the module docstring).
    """
    scanner = _scanner(patterns)
    total = 0
    found: dict[str, list[int]] | None = None  # made once, and again only after a replacement
    active: set[int] = set()  # the patterns one of whose literals ``found`` holds
    if scanner.anchored:
        found = scanner.find(text)
        if not found:  # no pattern's literal occurs: the common case, decided in one look
            return text, 0
        active = scanner.active(found)
    for index, (pattern, plan) in enumerate(zip(patterns, scanner.plans, strict=True)):
        hits: list[int] | None = None
        if plan.starts:
            if found is None:
                found = scanner.find(text)
                active = scanner.active(found)
            if index not in active:  # none of its literals occurs: most patterns, most texts
                continue
            hits = _candidates(found, text, plan, len(text) // _DENSITY + 16)
            if hits == []:
                continue
        repl = functools.partial(replace_match, groups=plan.groups)
        new, n = pattern.subn(repl, text) if hits is None else _sub_at(pattern, text, hits, repl)
        if n:
            text, found, total = new, None, total + n
    return text, total


def _starts(patterns: Sequence[re.Pattern[str]]) -> Callable[[int, str], list[int] | None]:
    """Where the pattern of an index can begin matching a text, as ``redact`` plans it (None:
    anywhere); the text's literals are found once, and again only once it changed."""
    scanner = _scanner(patterns)
    last: list[tuple[str, dict[str, list[int]]]] = []

    def starts(index: int, text: str) -> list[int] | None:
        plan = scanner.plans[index]
        if not plan.starts:
            return None
        if not last or last[0][0] is not text:
            last[:] = [(text, scanner.find(text))]
        return _candidates(last[0][1], text, plan, len(text) // _DENSITY + 16)

    return starts


def _holding(pieces: Sequence[str], patterns: Sequence[re.Pattern[str]]) -> Sequence[int]:
    """The indexes of ``pieces`` a pattern can match in alone, ascending: of many, those
    in which one of its start literals begins, found in one pass over the pieces joined,
    rather than a ``redact`` call per piece (a tool output in thousands of small parts);
    none when no literal occurs, so the joined text holds no match either."""
    scanner = _scanner(patterns)
    if len(pieces) < 2 or not scanner.anchored:
        return range(len(pieces))
    ends = list(accumulate(map(len, pieces)))
    found = scanner.find("".join(pieces))
    return sorted({bisect_right(ends, at) for hits in found.values() for at in hits})


def redact_message(msg: Message, patterns: Sequence[re.Pattern[str]]) -> tuple[Message, int]:
    """Redact a message's content: a string, or its text parts, each and then each run of
    them side by side as one text (a secret split between parts: ``redaction_parts``).
    A part's text is what the summary renders (``redaction_parts.part_texts``), whatever
    the role. Returns the *same* message object when nothing matched (the prompt cache
    keeps its prefix), else a new dict with only ``content`` replaced."""
    content = msg.get("content")
    if isinstance(content, str):
        text, n = redact(content, patterns)
        return (msg, 0) if n == 0 else ({**msg, "content": text}, n)
    if not isinstance(content, Sequence):
        return msg, 0
    total = 0
    parts: list[Any] = list(content)
    texts, keys = part_texts(parts)  # each text part's place -> its text, redacted below
    places = list(texts)
    holding = _holding(list(texts.values()), patterns)
    for i in (places[k] for k in holding):
        text, n = redact(texts[i], patterns)
        if n:
            total += n
            parts[i], texts[i] = rewritten(parts[i], keys.get(i, "text"), text), text
    for run in text_runs(places) if holding else ():
        if len(run) > 1 and redact("".join(texts[i] for i in run), patterns)[1]:
            pieces, n = redact_across([texts[i] for i in run], patterns, _starts(patterns))
            for i, piece in zip(run, pieces, strict=True):
                if piece != texts[i]:
                    parts[i] = rewritten(parts[i], keys.get(i, "text"), piece)
            total += n
    return (msg, 0) if total == 0 else ({**msg, "content": parts}, total)
