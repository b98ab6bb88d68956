"""The stored copy of a tool result as ``read_tool_output`` and the tool-outputs API page it:
read and redacted once per version, then paged from memory.

A model pages a large output in many calls, each of one page. Each page's offsets count
the text redacted whole (a page cannot be redacted alone), so reading the copy anew for a
page (``raw_outputs.fetchrow_raw_output``: the whole text from the database, decoded on the
event loop) and redacting all of it would cost the whole copy per page. The text read and
redacted is kept instead, under its version (``raw_outputs.fetchval_version``: the keys and
row versions of every row the read depends on), and a later read whose version is the same
pages that text after one small query. The text kept is the very text a fresh read gives,
so every page is unchanged.

The memory is bounded (``BUDGET_BYTES`` of text over all entries, least recently used first
out); a text past the budget alone is not kept. An entry is per tenant, session, id and
patterns (the tool-outputs API's unredacted read is its own entry), and each process keeps
its own: the version, read each time, is what makes an entry good, wherever it was written.

Reads of one key and version that come while its text is being redacted wait for that one
redaction (``_redacted``) instead of each making its own: a client that gives up on a
first page of megabytes and asks again, or two readers of one output, would otherwise
redact the whole copy once each, side by side on the page threads.
"""

from __future__ import annotations

import asyncio
import functools
import re
import sys
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.cascade.redaction import redact
from proxy.store import raw_outputs
from proxy.work_threads import PAGES, off_loop

__all__ = ["BUDGET_BYTES", "Output", "clear", "read_output"]

BUDGET_BYTES = 64 * 2**20
"""The most memory the kept texts take together (``sys.getsizeof``: 1 to 4 bytes a
character, as the widest character of each text needs)."""

_MAX_ENTRIES = 512

Key = tuple[str, str, str, tuple[tuple[str, int], ...]]


@dataclass(frozen=True, slots=True)
class Output:
    """A stored tool result as read: its text (redacted with the read's patterns), the
    bytes of the result the client sent, and whether the copy was capped."""

    content: str
    original_bytes: int
    capped: bool


@dataclass(slots=True)
class _Flight:
    """One redaction under way, how many reads wait for it, and whether its page thread
    began it (a queued one every reader left is cancelled, never made; a begun one runs to
    its end anyway, so it stays for the next read of the key and version to join)."""

    task: asyncio.Future[str] = field(init=False)
    waiting: int = 0
    begun: bool = False


_FLIGHTS: dict[tuple[Key, str], _Flight] = {}
_KEPT: OrderedDict[Key, tuple[str, Output, int]] = OrderedDict()  # version, output, bytes
_used = [0]  # bytes the kept texts take, each as counted when it was kept


def clear() -> None:
    """Forget every kept text (tests). A config reload needs no call: the patterns are part
    of each key, so a text redacted with patterns no longer in force is never read again."""
    _KEPT.clear()
    _used[0] = 0


async def read_output(
    conn: Any,
    *,
    tenant: str,
    session_id: str,
    tool_call_id: str,
    patterns: Sequence[re.Pattern[str]] = (),
) -> Output | None:
    """The id's newest result (or a pinned handle's: ``fetchrow_raw_output``) redacted with
    ``patterns``; None when not found. The version is read before the text or with it (a
    first read: ``fetch_first``, one round trip), so a text written after it is kept under
    the older version and read anew next time."""
    key: Key = (tenant, session_id, tool_call_id, tuple((p.pattern, p.flags) for p in patterns))
    kept = _KEPT.get(key)
    if kept is None:  # nothing to compare: the version comes with the read
        version, row = await raw_outputs.fetch_first(
            conn, tenant=tenant, session_id=session_id, tool_call_id=tool_call_id
        )
    else:
        version = await raw_outputs.fetchval_version(
            conn, tenant=tenant, session_id=session_id, tool_call_id=tool_call_id
        )
        if kept[0] == version:
            _KEPT.move_to_end(key)
            return kept[1]
        row = await raw_outputs.fetchrow_raw_output(
            conn, tenant=tenant, session_id=session_id, tool_call_id=tool_call_id
        )
    if row is None:
        _drop(key)  # its rows are gone (a deleted session): its text is not kept either
        return None
    text = str(row["content"])
    if patterns:
        text = await _redacted(key, version, text, patterns)
    out = Output(text, int(row["original_bytes"]), bool(row["capped"]))
    _keep(key, version, out)
    return out


async def _redacted(key: Key, version: str, text: str, patterns: Sequence[re.Pattern[str]]) -> str:
    """``text`` (the key's at ``version``) redacted on a page thread (redacting up to
    rawCapBytes of text on the event loop would hold every other request until it is done:
    ``work_threads``), or the redaction of it already under way: one key and version read
    the same text. The redaction is cancelled when every read waiting for it goes away
    before its page thread begins it."""
    at = (key, version)
    flight = _FLIGHTS.get(at)
    if flight is None:
        flight = _FLIGHTS[at] = _Flight()
        flight.task = asyncio.ensure_future(off_loop(PAGES, _begin, flight, text, patterns))
        flight.task.add_done_callback(functools.partial(_landed, at, flight))
    flight.waiting += 1
    try:
        return await asyncio.shield(flight.task)
    finally:
        flight.waiting -= 1
        if flight.waiting == 0 and not flight.begun and not flight.task.done():
            del _FLIGHTS[at]
            flight.task.cancel()


def _begin(flight: _Flight, text: str, patterns: Sequence[re.Pattern[str]]) -> str:
    flight.begun = True  # on the page thread: from here the redaction runs to its end
    return redact(text, patterns)[0]


def _landed(at: tuple[Key, str], flight: _Flight, task: asyncio.Future[str]) -> None:
    if _FLIGHTS.get(at) is flight:
        del _FLIGHTS[at]
    if not task.cancelled():
        task.exception()  # retrieved: it reached every read waiting, if any was left


def _keep(key: Key, version: str, out: Output) -> None:
    _drop(key)
    # counted once: a text's size grows when CPython keeps its UTF-8 form beside it (a C
    # extension asked for it), and a drop gives back what the keep took
    size = sys.getsizeof(out.content)
    if size > BUDGET_BYTES:
        return
    _KEPT[key] = (version, out, size)
    _used[0] += size
    while _used[0] > BUDGET_BYTES or len(_KEPT) > _MAX_ENTRIES:
        _drop(next(iter(_KEPT)))


def _drop(key: Key) -> None:
    old = _KEPT.pop(key, None)
    if old is not None:
        _used[0] -= old[2]
