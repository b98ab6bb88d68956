"""Secret redaction: replace credentials in text before it is stored, spilled or forwarded.

Every pattern is built to run in linear time on multi-megabyte tool output: each starts with a
literal or a short keyword, and every quantifier is bounded, so no input can make the engine
backtrack catastrophically. A pattern with a named group whose name starts with ``secret``
(``secret``, ``secret2`` …) keeps the surrounding text (the key name, the ``Bearer`` word) and
replaces only that group; any other match is replaced whole. Replacements are
:data:`REDACTED`, which no pattern matches again, so redaction is idempotent.

Almost no text holds a secret, so :func:`redact` tries each regex only where one of its start
literals begins (``proxy.cascade.redaction_scan`` finds them, all patterns' in one pass). That
is exactly what ``subn`` would have matched, since no match can begin anywhere else, so the
result is identical (the unit tests prove it against the plain loop). When every pattern has
literals and none occurs (most texts), no regex runs at all. ``python -m
bench.redaction_speed`` compares :func:`redact` with the plain loop; docs/perf.md has the
figures.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

from proxy.cascade.redaction_parts import (
    part_texts,
    redact_across,
    replace_match,
    rewritten,
    text_runs,
)
from proxy.cascade.redaction_scan import candidates, pieces_holding, scanner_for, starts_of
from proxy.cascade.secret_patterns import DEFAULT_PATTERNS, REDACTED
from proxy.cascade.types import Message
from proxy.config_context import RedactionConfig

__all__ = [
    "REDACTED",
    "DEFAULT_PATTERNS",
    "compile_patterns",
    "patterns_of",
    "redact",
    "redact_head",
    "head_reach",
    "REDACT_PAST",
    "REDACT_LONG_PAST",
    "LONG_STARTS",
    "redact_message",
]


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
    scanner = scanner_for(patterns)
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
            hits = candidates(found, text, plan)
            if hits == []:
                continue
        repl = functools.partial(replace_match, groups=plan.groups)
        new, n = pattern.subn(repl, text) if hits is None else _sub_at(pattern, text, hits, repl)
        if n:
            text, found, total = new, None, total + n
    return text, total


REDACT_PAST = 4608
"""How far past a cut :func:`redact_head` reads: further than any pattern needs to read a
secret that begins before the cut (each quantifier is bounded; a PEM block cut short is
redacted through the text's end), but for those that begin with one of :data:`LONG_STARTS`."""

LONG_STARTS = ("-----BEGIN ", "eyJ")
"""What the patterns begin with whose match may be longer than :data:`REDACT_PAST`: a PEM
block, read to its END line through 20,000 characters of body (an escaped line's end is
two), which the pattern for a block cut short does not always read in its place (lines
joined by escaped escapes, a file's ``\\n`` in a call's JSON arguments); a JSON Web Token,
whose payload reaches 8,192 characters."""

REDACT_LONG_PAST = 40_960
"""How far past a cut :func:`redact_head` reads when one of :data:`LONG_STARTS` occurs
before it: as far as the longest such match reaches."""


def head_reach(chars: int) -> int:
    """The most characters :func:`redact_head` reads of a text for a head of ``chars``: a
    text cut one character past it is read as the whole text would be (a cut shorter is
    read as that text's end, where a secret the cut ran through is a part no pattern reads)."""
    return 2 * (chars + REDACT_LONG_PAST)


def redact_head(text: str, chars: int, patterns: Sequence[re.Pattern[str]]) -> str:
    """The first ``chars`` characters of ``text`` redacted. Redacting the cut text would
    leave a secret the cut runs through, a part no pattern reads (an ``sk-…`` key's first
    characters), so the text is redacted :data:`REDACT_PAST` characters past the cut first
    (:data:`REDACT_LONG_PAST` where one of :data:`LONG_STARTS` occurs before it); only
    that much is read, so a long text costs no more than a short one.

    A secret redacted shortens the text and brings what followed it into the head, from
    as far as the end of what was read, where a secret the reading cut short is such a
    part. So the head keeps only what lay that far before the end of what
    was read (each replacement lengthens the text by ``len(REDACTED)`` at most): a text
    that redaction shortened is read once more, further by as much, and a head still short
    of that (a second reading shortened too) is cut shorter than ``chars``. The second
    reading reads at most twice as much as the first (:func:`head_reach`), and a head it
    reads too little for is cut shorter as well."""
    if not patterns:
        return text[:chars]
    near = text[: chars + len(LONG_STARTS[0])]
    past = REDACT_LONG_PAST if any(s in near for s in LONG_STARTS) else REDACT_PAST
    read, short = chars + past, 0
    for _ in range(2):
        read = min(read + short, 2 * (chars + past))
        redacted, count = redact(text[:read], patterns)
        if len(text) <= read:
            return redacted[:chars]
        short = chars + past + count * len(REDACTED) - len(redacted)
        if short <= 0:
            return redacted[:chars]
    return redacted[: max(chars - short, 0)]


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
    holding = pieces_holding(list(texts.values()), patterns)
    for i in (places[k] for k in holding):
        text, n = redact(texts[i], patterns)
        if n:
            total += n
            parts[i], texts[i] = rewritten(parts[i], keys.get(i, "text"), text), text
    for run in text_runs(places) if holding else ():
        if len(run) > 1 and redact("".join(texts[i] for i in run), patterns)[1]:
            pieces, n = redact_across([texts[i] for i in run], patterns, starts_of(patterns))
            for i, piece in zip(run, pieces, strict=True):
                if piece != texts[i]:
                    parts[i] = rewritten(parts[i], keys.get(i, "text"), piece)
            total += n
    return (msg, 0) if total == 0 else ({**msg, "content": parts}, total)
