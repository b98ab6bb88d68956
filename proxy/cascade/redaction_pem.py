"""A PEM private key written across the strings of a call's arguments (a key as its lines, an
array's items): which strings its block spans, read in the arguments' text order, so that
reading the arguments entry by entry redacts what reading their whole text would have."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from proxy.cascade.secret_patterns import DEFAULT_PATTERNS

__all__ = ["Block", "spans_strings"]

_PEM_BEGIN = re.compile(r"-----BEGIN (?:[A-Z0-9]{1,20} ){0,3}PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END (?:[A-Z0-9]{1,20} ){0,3}PRIVATE KEY-----")
_PEM_BODY = re.compile(r"[\sA-Za-z0-9+/=:,\-]*")
"""What the pattern for a block cut short reads as its body."""


class Block:
    """Which strings of a value, read in its text's order, a PEM block spans across entries:
    from one whose last BEGIN line has no END line after it, when a later string holds one,
    up to and including that later string. Else the block is cut short, and spans the items
    after it in its array (a key written as its lines) that are all the body's characters,
    as the pattern for a block cut short reads them in one text. Only where the built-in
    PEM pattern applies."""

    def __init__(self, value: Any, patterns: Sequence[re.Pattern[str]]) -> None:
        self._value = value
        self.on = any(p.pattern == DEFAULT_PATTERNS[0] for p in patterns)
        self._open = False
        self._ends_read = 0  # strings holding an END line read so far
        self._ends: int | None = None  # all of them, counted once a block may open
        self._cut: Any = None  # the array whose items go on a block cut short

    def spans(self, node: Any, into: Any) -> bool:
        """Whether ``node``, the next scalar in order (an entry of ``into``), is inside a
        block."""
        if not self.on or not isinstance(node, str):
            return False
        if self._cut is not None:
            if into is self._cut and _PEM_BODY.fullmatch(node):
                return True
            self._cut = None
        ends = _PEM_END.search(node) is not None
        self._ends_read += ends
        inside, self._open = self._open, self._open and not ends
        if self._open:
            return True
        # a BEGIN line after the string's last END line (if any) opens a block
        opened = max((m.end() for m in _PEM_BEGIN.finditer(node)), default=-1)
        if opened >= 0 and not _PEM_END.search(node, opened):
            if self._ends is None:
                self._ends = _count_ends(self._value)
            self._open = self._ends > self._ends_read
            if not self._open and isinstance(into, list):
                self._cut = into
        return inside


def spans_strings(value: Any, patterns: Sequence[re.Pattern[str]]) -> bool:
    """Whether a PEM block in ``value`` spans strings (``Block``): its text read whole
    redacts a block cut short only up to its string's end."""
    block = Block(value, patterns)
    return block.on and any(block.spans(node, into) for into, node in _scalars(value))


def _count_ends(value: Any) -> int:
    """How many strings in ``value`` hold a PEM END line."""
    return sum(1 for _, node in _scalars(value) if isinstance(node, str) and _PEM_END.search(node))


def _scalars(value: Any) -> Iterator[tuple[Any, Any]]:
    """Each scalar in ``value`` with the container holding it (None: ``value`` itself), in
    its JSON text's order; walked without recursion."""
    stack: list[tuple[Any, Any]] = [(None, value)]
    while stack:
        into, node = stack.pop()
        if isinstance(node, Mapping | list):
            entries = node if isinstance(node, list) else node.values()
            stack.extend((node, v) for v in reversed(list(entries)))
        else:
            yield into, node
