"""A large chat body parsed a piece of its ``messages`` at a time, the event loop free between
pieces.

orjson holds the interpreter's lock for the whole of a parse, so a body parsed on a thread
stalls the loop as long as one parsed on it (docs/perf.md): a body at the 32 MiB limit held
every other request and stream for the whole parse. Parsed here, the loop waits at most one
piece's parse (``PIECE_BYTES``) at a time; a body of no more than that is parsed whole, as
before, at no extra cost.

Soundness rests on bytes alone, as ``services.resent``'s does. The body is ``H + [ + I + ] +
T``: ``H`` ends with the top-level key ``"messages":`` (``H + 'null}'`` parses as an object).
From the start of an item of ``I`` (outside any string, at the array's own level), a run of
bytes ``g`` up to a ``,`` after a ``}`` is a run of whole items exactly when ``[[ + g + ]]``
parses: JSON's grammar reads those bytes in the body as it reads them there, and the next
run starts after that ``,``, at an item again. A run cannot pass the array's end: what
follows it in the body is the object's (``, "key":``), which no array holds. Runs end only
where the next object begins with ``"role"`` (a message, as clients write one), which a
string cannot hold unescaped; one that ends inside a nested array or a string does not
parse, and it is tried longer. Where a run should end is a guess; that it ends at an item
is checked. The last run's end is where ``[`` + the rest stops parsing, and ``T`` is read
as ``{"messages":null`` + ``T``. Each part is parsed at its depth in the body, so a value
orjson refuses as too deep is refused in a part as in the whole. Anything else (no such key,
an empty array, a ``T`` that may hold another ``messages`` key, a run that never parses)
answers None, and the caller parses the body whole, with its errors.

The bytes parsed for nothing (a nested key's head, a run that does not parse, the last run's
first pass) are bounded by about half the body (``room``): past that the body is left to the
whole parse, so a body laid out against the guesses costs about one parse more than before,
never several.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Generator
from typing import Any

from proxy.jsonio import exact_fields, loads

__all__ = ["PIECE_BYTES", "in_pieces", "parsed_in_pieces"]

PIECE_BYTES = 1 << 20
"""How many bytes of ``messages`` are parsed between two turns of the loop (at least; a run
ends at an item's end), and the size from which a body is parsed in pieces."""

# Both begin with a literal, which the regex engine searches for fast (one beginning with a
# byte class tries a match at each brace or comma, and code is full of both); the runs' ends
# are looked for from a piece on, never between.
_KEY = re.compile(rb'"messages"[ \t\r\n]*:[ \t\r\n]*\[')
# An object's end and a comma, before another object's "role": most likely between two
# messages, rarely elsewhere (a nested array of such objects; a string holding those bytes)
_GAP = re.compile(rb'\},[ \t\r\n]*\{[ \t\r\n]*"role"')
_WS = b" \t\r\n"
_AFTER_DOCUMENT = "unexpected content after document"
_TRIES = 4  # top-level "messages" keys looked for, past nested ones
Parsed = tuple[Any, int]  # the body, and the offset just after its last message


async def parsed_in_pieces(raw: bytes, piece: int = PIECE_BYTES) -> Parsed | None:
    """``in_pieces(raw, piece)``, the loop let run between pieces."""
    steps = in_pieces(raw, piece)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        await asyncio.sleep(0)


def in_pieces(
    raw: bytes, piece: int = PIECE_BYTES, room: int | None = None
) -> Generator[None, None, Parsed | None]:
    """(what ``jsonio.loads_exact(raw)`` answers, the offset just after the last item of its
    ``messages``), yielding between pieces; None when the body is not laid out as the module
    docstring says, or does not parse, or more than ``room`` bytes (half the body, or a few
    pieces) are parsed for nothing: the caller parses it whole."""
    room = max(len(raw) // 2, 4 * piece) if room is None else room
    found = _head(raw, room)
    if found is None:
        return None
    body, start, spent = found
    room -= spent
    items: list[Any] = []
    at, want = start + 1, piece
    while (gap := _GAP.search(raw, at + want - 1)) is not None:
        comma = gap.start() + 1
        try:
            run = loads(b"[[" + raw[at:comma] + b"]]")[0]
        except ValueError:
            room -= comma - at
            if room < 0:
                return None
            want = (comma - at) * 3 // 2  # tried again longer: a few times the run's bytes
            yield
            continue
        items += run
        at, want = comma + 1, piece
        yield
    if len(raw) - at > room:  # the rest is parsed twice below: once, whole, costs less
        return None
    last = _last(raw, at)
    if last is None:
        return None
    rest, end = last
    items += rest.pop("messages")
    body["messages"] = items
    body.update(rest)  # a key in both: where H has it, with T's value, as a whole parse has
    try:
        return exact_fields(body, raw), end
    except ValueError:  # a field nested too deep: the whole parse's 400 says which
        return None


def _head(raw: bytes, room: int) -> tuple[dict[str, Any], int, int] | None:
    """``H``'s object (``messages`` null), the offset of the array's ``[``, and the bytes
    parsed for nothing on the way (nested keys' heads): past ``room``, no more tries."""
    spent = 0
    for tries, match in enumerate(_KEY.finditer(raw)):
        if tries == _TRIES or spent > room:
            return None  # each try parses all before it: a few, never one per match
        start = match.end() - 1
        try:
            head = loads(raw[:start] + b"null}")
        except ValueError:
            spent += start
            continue  # a nested "messages" key: the object is not closed by one brace
        return (head, start, spent) if isinstance(head, dict) else None
    return None


def _last(raw: bytes, at: int) -> tuple[dict[str, Any], int] | None:
    """The last run of items from ``at`` with ``T``: ``{"messages": [those], T's fields}``, and
    the offset just after the last item; None when the array ends with no item there (a
    trailing comma, an empty array) or ``T`` may hold another ``messages`` key (written so,
    or with a ``\\u`` escape: no other escape spells a letter of it)."""
    if raw[at:].lstrip(_WS)[:1] in (b"]", b""):
        return None
    try:
        loads(b"[" + raw[at:])
    except ValueError as exc:
        pos, doc = getattr(exc, "pos", None), getattr(exc, "doc", None)
        if getattr(exc, "msg", None) != _AFTER_DOCUMENT or not isinstance(pos, int):
            return None
        if not isinstance(doc, str):
            return None
        # orjson reports a character index into the decoded document, not a byte offset
        after = at - 1 + (pos if doc.isascii() else len(doc[:pos].encode()))
    else:
        return None  # nothing after the array: not an object's body
    tail = raw[after:]
    if b'"messages"' in tail or b"\\u" in tail:
        return None
    try:
        rest = loads(b'{"messages":null' + tail)
        items = loads(b"[[" + raw[at:after] + b"]")[0]
    except ValueError:
        return None
    if not isinstance(rest, dict):
        return None
    rest["messages"] = items
    end = raw.rindex(b"]", at, after)
    while raw[end - 1] in _WS:
        end -= 1
    return rest, end
