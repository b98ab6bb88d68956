"""The literals that begin every match of a regex, read from its parse tree.

:mod:`proxy.cascade.redaction` tries a pattern only where one of these occurs (``sk-``,
``AKIA``, ``bearer`` …; lowercased when the pattern ignores case), which is exact: no match
can begin anywhere else. A pattern whose matches can begin with anything (``\\d{4}``, ``.``)
has none, and is scanned whole.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typeshed describes the same modules under their former public names
    import sre_constants as _op
    import sre_parse as _parser
else:
    try:  # the stdlib's own regex parser: private, but the only exact reading of a pattern
        from re import _constants as _op, _parser
    except ImportError:  # pragma: no cover - a future Python: every pattern runs as a scan
        _parser = None

__all__ = ["start_literals"]

_MAX_STARTS = 32  # most start literals kept for one pattern
_MAX_CLASS = 8  # a class of at most this many plain characters expands into start literals
_MAX_COPIES = 3  # so does a repeat of at most this many copies

# (strings, complete, folded): every match begins with one of ``strings`` (is one of them,
# when ``complete``); ``folded`` when a case-insensitive literal went into them.
_Prefixes = tuple[frozenset[str], bool, bool]
_EMPTY: _Prefixes = (frozenset({""}), True, False)
_UNKNOWN: _Prefixes = (frozenset({""}), False, False)


def start_literals(pattern: re.Pattern[str]) -> tuple[tuple[str, ...], bool]:
    """The fewest literals one of which begins every match; ``((), False)`` when unknown."""
    if (
        _parser is None
        or not isinstance(pattern, re.Pattern)
        or not isinstance(pattern.pattern, str)
    ):
        return (), False
    try:
        tree = _parser.parse(pattern.pattern, pattern.flags)
        strings, _, folded = _sequence(tree, bool(tree.state.flags & re.IGNORECASE))
    except Exception:  # the private parser changed shape: lose speed, never correctness
        return (), False
    # Only ASCII literals: each then sits lowercased at the same place in the folded text
    # (``str.lower`` of other text can depend on context, as the Greek final sigma does).
    if not all(s.isascii() for s in strings):
        return (), False
    if folded:
        strings = frozenset(s.lower() for s in strings)
    if "" in strings:
        return (), False
    # A literal that begins with another one finds nothing the shorter one misses.
    return tuple(
        sorted(s for s in strings if not any(s.startswith(t) for t in strings - {s}))
    ), folded


def _sequence(items: Any, icase: bool) -> _Prefixes:
    acc, folded = frozenset({""}), False
    for op, av in items:
        strings, complete, node_folded = _node(op, av, icase)
        joined = frozenset(a + s for a in acc for s in strings)
        if len(joined) > _MAX_STARTS:
            return acc, False, folded
        acc, folded = joined, folded or node_folded
        if not complete:
            return acc, False, folded
    return acc, True, folded


def _node(op: Any, av: Any, icase: bool) -> _Prefixes:
    if op == _op.LITERAL:
        return frozenset({chr(av)}), True, icase
    if op == _op.IN:
        if len(av) <= _MAX_CLASS and all(kind == _op.LITERAL for kind, _ in av):
            return frozenset(chr(code) for _, code in av), True, icase
        return _UNKNOWN
    if op in (_op.AT, _op.ASSERT, _op.ASSERT_NOT):  # zero width
        return _EMPTY
    if op == _op.SUBPATTERN:
        _, add, remove, sub = av
        return _sequence(sub, (icase or bool(add & re.IGNORECASE)) and not remove & re.IGNORECASE)
    if op == _op.ATOMIC_GROUP:
        return _sequence(av, icase)
    if op == _op.BRANCH:
        alternatives = [_sequence(alt, icase) for alt in av[1]]
        return (
            frozenset().union(*(strings for strings, _, _ in alternatives)),
            all(complete for _, complete, _ in alternatives),
            any(folded for _, _, folded in alternatives),
        )
    if op in (_op.MAX_REPEAT, _op.MIN_REPEAT, _op.POSSESSIVE_REPEAT):
        return _repeat(av[0], av[1], av[2], icase)
    return _UNKNOWN  # any character, a category, a backreference, a conditional …


def _repeat(least: int, most: int, sub: Any, icase: bool) -> _Prefixes:
    strings, complete, folded = _sequence(sub, icase)
    if complete and most <= _MAX_COPIES:  # spell out ``(?:or)?``, ``[_-]?`` …
        options: set[str] = set()
        layer = {""}
        for copies in range(most + 1):
            if copies >= least:
                options |= layer
            if copies < most:
                layer = {a + s for a in layer for s in strings}
            if len(options) > _MAX_STARTS or len(layer) > _MAX_STARTS:
                break
        else:
            return frozenset(options), True, folded
    if least >= 1:
        return strings, False, folded
    return _UNKNOWN
