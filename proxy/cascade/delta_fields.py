"""A provider's own fields of a streamed reply, merged as the openai SDK's stream helper does.

The proxy builds a streamed reply's ``role``, ``content``, ``refusal``, ``function_call`` and
``tool_calls`` itself (``proxy/chunks.py``): those are the one definition of what it builds
(``BUILT``). Every other field of the deltas is the provider's own: DeepSeek's
``reasoning_content``, ``annotations``, ``audio``, OpenRouter's ``reasoning_details``. The
SDK's helper (``client.chat.completions.stream``) merges them field by field
(``accumulate_delta``): strings are joined, numbers added, objects merged key by key, lists
of entries with an ``index`` merged entry by entry, other lists extended, and ``index`` and
``type`` take their last value. A client resends ``model_dump()`` of that message, so the
stored reply merges the fields alike and the resend hashes equal to it (``history.py``).

Where the SDK raises (a list of objects without ``index`` sent twice), the lists are joined:
that client has no message to resend, and the others keep every entry the provider sent.
A value of another type than the one merged so far is left out, as the SDK leaves it out.

Strings grow as lists of pieces until ``plain`` joins them, so a field streamed in many
pieces (an audio's base64 ``data``) costs its length, not its length times its pieces. The
fields of one reply are held to ``cap`` characters together (``OwnFields``), and to a depth
the merge's recursion can take: a field that would pass either is left out whole, since a
part of it is no message the provider sent, and the client's resend (the message it kept)
supersedes the stored reply.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["BUILT", "OwnFields", "own_fields", "rounds_merged"]

BUILT = frozenset(("role", "content", "refusal", "function_call", "tool_calls"))
"""The fields of a streamed reply the proxy builds itself; the rest are the provider's own."""


class _Pieces(list[str]):
    """A string being merged: its pieces, joined by ``plain``."""


_SCALAR = (str, int, float)


class _List(list[Any]):
    """A list being merged, and whether its entries are all scalars (the SDK extends such a
    list), kept as entries are added, so a delta costs what it adds, not the list so far."""

    __slots__ = ("scalars",)

    def __init__(self, entries: list[Any]) -> None:
        super().__init__(entries)
        self.scalars = all(isinstance(v, _SCALAR) for v in entries)


def own_fields(delta: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """The provider's own fields of a delta or message (those not ``BUILT``), null ones left
    out: a null sets nothing the SDK keeps."""
    for key, value in delta.items():
        if value is not None and key not in BUILT:
            yield key, value


def _grown(value: Any) -> Any:
    """``value`` as the merge holds it: a copy whose strings (outside lists) are pieces."""
    if isinstance(value, str):
        return _Pieces((value,))
    if isinstance(value, Mapping):
        return {k: _grown(v) for k, v in value.items()}
    if isinstance(value, list):
        return _List([_entry(v) for v in value])
    return value


def _entry(value: Any) -> Any:
    """A list's entry as the merge holds it: an object's strings grow, nothing else does."""
    return _grown(value) if isinstance(value, Mapping) else _copy(value)


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    return [_copy(v) for v in value] if isinstance(value, list) else value


def _indexed(value: Any) -> bool:
    return isinstance(value, list) and any(isinstance(v, Mapping) and "index" in v for v in value)


def _number(value: Any) -> bool:
    return isinstance(value, int | float)  # bool too: the SDK adds them as Python does


def merge(acc: dict[str, Any], delta: Mapping[str, Any]) -> None:
    """Merge ``delta`` into ``acc`` (held as ``_grown`` makes it) as ``accumulate_delta``."""
    for key, value in delta.items():
        if acc.get(key) is None:
            if not _indexed(value):
                acc[key] = _grown(value)
                continue
            acc[key] = _List([])
        held = acc[key]
        if key in ("index", "type"):
            acc[key] = _grown(value)
        elif isinstance(held, _Pieces):
            if isinstance(value, str):
                held.append(value)
        elif _number(held) and _number(value):
            acc[key] = held + value
        elif isinstance(held, dict) and isinstance(value, Mapping):
            merge(held, value)
        elif isinstance(held, _List) and isinstance(value, list):
            _merge_list(held, value)


def _merge_list(held: _List, value: list[Any]) -> None:
    if held.scalars and (held or not _indexed(value)):
        held.extend(_entry(v) for v in value)  # an object among them may be merged into
    else:
        _merge_entries(held, value)
    held.scalars = held.scalars and all(isinstance(v, _SCALAR) for v in value)


def _merge_entries(held: list[Any], value: list[Any]) -> None:
    for entry in value:
        index = entry.get("index") if isinstance(entry, Mapping) else None
        if not isinstance(index, int) or isinstance(index, bool):
            held.append(_entry(entry))  # the SDK raises here: keep what was sent
        elif not -len(held) <= index < len(held):
            held.append(_entry(entry))  # as ``list.insert`` past the end does
        elif isinstance(held[index], dict):
            merge(held[index], entry)


def plain(value: Any) -> Any:
    """A merged value as JSON holds it: its strings' pieces joined."""
    if isinstance(value, _Pieces):
        return "".join(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


_DEPTH = 32
"""The deepest a field's value nests (objects and lists) to be merged: the merge and the store
recurse, and a deeper one is left out, as one over the cap is."""


def _size(value: Any) -> int | None:
    """About what ``value`` holds, in characters (its strings' length, a few per other value);
    ``None`` when it nests deeper than ``_DEPTH``. Read without recursion, as JSON allows."""
    total = 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > _DEPTH:
            return None
        if isinstance(item, str):
            total += len(item) + 2
        elif isinstance(item, Mapping):
            total += 2 + sum(len(str(k)) + 4 for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            total += 2 + len(item)
            stack.extend((v, depth + 1) for v in item)
        else:
            total += 8
    return total


class OwnFields:
    """A streamed reply's own fields, merged delta by delta and held to ``cap`` characters and
    ``_DEPTH`` levels."""

    __slots__ = ("cap", "_acc", "_sizes", "_total", "_dropped")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._acc: dict[str, Any] = {}
        self._sizes: dict[str, int] = {}  # each field's, as ``_size`` counts its pieces
        self._total = 0
        self._dropped: set[str] = set()

    def add(self, delta: Mapping[str, Any]) -> None:
        """Merge the delta's own fields; one that would pass the cap is left out from then on."""
        for key, value in own_fields(delta):
            if key in self._dropped:
                continue
            size = _size(value)
            if size is None or self._total + size > self.cap:
                self._dropped.add(key)
                self._acc.pop(key, None)
                self._total -= self._sizes.pop(key, 0)
                continue
            self._sizes[key] = self._sizes.get(key, 0) + size
            self._total += size
            merge(self._acc, {key: value})

    def plain(self) -> dict[str, Any]:
        """The merged fields as the reply stores them."""
        out: dict[str, Any] = plain(self._acc)
        return out


def rounds_merged(rounds: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The provider's own fields and ``refusal`` of a stream's rounds (each one's reply),
    merged in turn: the client's stream carried every round's deltas, and its SDK merged
    them all into one message, as it merged ``content``, which the caller joins."""
    acc: dict[str, Any] = {}
    for n, message in enumerate(rounds):
        fields = {**dict(own_fields(message)), "refusal": message.get("refusal")}
        if n:
            merge(acc, fields)
        else:  # as it is: merged again, a list's entries could move
            acc = _grown(fields)
    out: dict[str, Any] = plain(acc)
    if out.get("refusal") is None:
        out.pop("refusal", None)
    return out
