"""Messages as the client sent them, for a client that resends a stored history.

The store keeps each message in its prompt form (a result cut at ingestion, an evicted
result's placeholder), while the hash chain is over what the client sent. The console's
composer resends the history the way any client does, so it needs the sent form back or the
proxy would take the rewritten rows for an edited history and supersede them.

A tool call id can come back within a session (agents that number their calls ``call_0``
each turn): ``tool_raw_outputs`` holds the newest spill under the id and
``tool_raw_output_versions`` the ones it replaced (migration 0010), and no column says which
message a spill was cut from. The stored hash chain does: a row's hash is
``chain_hash(previous row's hash, the message as sent)``, so of the spills under its id the
one that belongs to a row is the one that rebuilds a message hashing to the row's hash. A
result sent as a list of content parts hashes as parts, and only its text is spilled: its
spill is the one its stored cut was made from (head, marker, tail where the marker says), and
its sent form is that text. A row neither links gets no sent form rather than another
result's text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from proxy.cascade.text import content_text, with_text
from proxy.cascade.truncation import has_cut_marker, is_cut_from
from proxy.history import hashes_after
from proxy.store.nul import decode
from proxy.store.usage import fetch_spilled_ids
from proxy.work_threads import HASHES, off_loop

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = [
    "fetch_sent_forms",
    "fetch_spilled_cuts",
    "fetch_superseded_sent_forms",
    "fetch_unkept_cuts",
    "hashes_to",
]

ON_LOOP_CHARS = 65_536
"""The most characters of text a message may hold for :func:`hashes_to` to hash it on the
event loop: a longer one is hashed on a thread, where a tool result of megabytes (its
canonical form written, then its SHA-256) would hold every stream on the replica for as long
as it takes."""


async def hashes_to(prevs: Sequence[str], msg: Mapping[str, Any], target: str) -> bool:
    """``hashes_after(prevs, msg, target)``: whether ``msg`` continues one of ``prevs`` to
    ``target``. A message with more than :data:`ON_LOOP_CHARS` of text in any field (a
    result's content, a call's arguments) is hashed on a hash thread (``work_threads``:
    not the loop's default executor, where a query embedding and DNS lookups run, nor a
    page thread, behind a burst of greps), the loop free meanwhile; a short one on the
    loop, where the hop to a thread would cost more."""
    if not _longer(msg, ON_LOOP_CHARS):
        return hashes_after(prevs, msg, target)
    return await off_loop(HASHES, hashes_after, prevs, msg, target)


def _longer(value: Any, limit: int) -> bool:
    """Whether the strings in ``value`` (nested lists and mappings) hold more than ``limit``
    characters together; counted without joining or copying them, stopping once past."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            limit -= len(v)
            if limit < 0:
                return True
        elif isinstance(v, Mapping):
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)
    return False


# An evicted row keeps its body beside the placeholder (migration 0008): ``message``.
# ``prev`` is the live row before it, whose hash the row's hash continues.
FETCH_SENT_FORMS = """
SELECT m.pos, m.message, m.hash, coalesce(p.hash, '') AS prev, m.tool_call_id, m.created_at
FROM messages m
LEFT JOIN messages p ON p.tenant = m.tenant AND p.session_id = m.session_id
     AND p.pos = m.pos - 1 AND p.superseded_at IS NULL
WHERE m.tenant = $1 AND m.session_id = $2 AND m.superseded_at IS NULL
  AND m.pos = ANY($3::int[])
"""

# A cut result's whole text is one of the spills under its id (the newest, or one it
# replaced), unless that spill itself was capped. Each is read once, however many rows
# share its id.
FETCH_SPILLS = """
SELECT tool_call_id, content, created_at FROM tool_raw_outputs
WHERE tenant = $1 AND session_id = $2 AND tool_call_id = ANY($3::text[]) AND NOT capped
UNION ALL
SELECT tool_call_id, content, created_at FROM tool_raw_output_versions
WHERE tenant = $1 AND session_id = $2 AND tool_call_id = ANY($3::text[]) AND NOT capped
"""


# A superseded row's previous row is one of the rows at the position before it, live or
# superseded: whichever was live when it was stored.
FETCH_SUPERSEDED = """
SELECT m.id, m.message, m.hash, m.tool_call_id, m.created_at,
       coalesce(array_agg(p.hash) FILTER (WHERE p.hash IS NOT NULL), '{}') AS prevs
FROM messages m
LEFT JOIN messages p ON p.tenant = m.tenant AND p.session_id = m.session_id
     AND p.pos = m.pos - 1
WHERE m.tenant = $1 AND m.session_id = $2 AND m.id = ANY($3::bigint[])
GROUP BY m.id
"""


async def _rebuilt(
    row: Any, spills: Sequence[tuple[datetime, str]], prevs: Sequence[str] | None = None
) -> Any:
    """The cut row as sent: with the content of the spill that rebuilds a message hashing
    to the row's hash (continuing ``prevs``, else the row's ``prev``); else with the text of
    the spill its cut was made from (sent as parts); else None. The spill written with the
    row (one statement) is tried first."""
    message, at = dict(row["message"]), row["created_at"]
    texts = [decode(raw) for _, raw in sorted(spills, key=lambda s: abs(s[0] - at))]
    parts = message.get("content") if isinstance(message.get("content"), list) else None
    for text in texts:
        # sent as a string; or as parts the rewrite kept (``with_text``: an image beside)
        for content in (text,) if parts is None else (text, with_text(parts, text)):
            candidate = message | {"content": content}
            if await hashes_to(prevs or [row["prev"]], candidate, row["hash"]):
                return candidate
    cut = message.get("content")
    for text in texts:
        if isinstance(cut, str) and is_cut_from(cut, text):
            return message | {"content": text}
    return None


async def fetch_sent_forms(
    conn: Executor, *, tenant: str, session_id: str, positions: Sequence[int]
) -> dict[int, dict[str, Any]]:
    """pos -> the message as it was sent, for those of ``positions`` whose sent form the
    store holds and can tie to the row: as stored (never cut, or an evicted row's body)
    when that hashes to the row's hash, else rebuilt from its own spill. A redacted secret
    is never stored, so a redacted row has none; nor has a result cut with no uncapped
    spill of its own."""
    if not positions:
        return {}
    out: dict[int, dict[str, Any]] = {}
    cut = []
    for r in await conn.fetch(FETCH_SENT_FORMS, tenant, session_id, list(positions)):
        message = dict(r["message"])
        if await hashes_to([r["prev"]], message, r["hash"]):
            out[r["pos"]] = message
        elif r["tool_call_id"] is not None:
            cut.append(r)
    if not cut:
        return out
    ids = sorted({r["tool_call_id"] for r in cut})
    spills: dict[str, list[tuple[datetime, str]]] = {}
    for s in await conn.fetch(FETCH_SPILLS, tenant, session_id, ids):
        spills.setdefault(s["tool_call_id"], []).append((s["created_at"], s["content"]))
    for r in cut:
        message = await _rebuilt(r, spills.get(r["tool_call_id"], []))
        if message is not None:
            out[r["pos"]] = message
    return out


async def fetch_spilled_cuts(
    conn: Executor, *, tenant: str, session_id: str, rows: Sequence[Any]
) -> list[bool]:
    """For each of ``rows`` (``messages.fetch_messages``'): whether it is a result cut at
    ingestion with its text spilled, a spill kept under its id and its stored body not the
    message sent (its hash says so). The id alone would mark every result under an id a
    client reuses (``call_0`` every turn) once one of them was cut; a redacted result keeps
    no spill of its own, whatever its id holds. A superseded row is judged by its id alone
    here (its chain is no longer the live one): :func:`fetch_superseded_sent_forms` tells
    whether its body is what was sent."""
    ids = [decode(r["tool_call_id"]) for r in rows if r["tool_call_id"] is not None]
    spilled = await fetch_spilled_ids(conn, tenant=tenant, session_id=session_id, tool_call_ids=ids)
    candidate = [
        r["tool_call_id"] is not None and not r["redacted"] and decode(r["tool_call_id"]) in spilled
        for r in rows
    ]
    live = [r["pos"] for r, c in zip(rows, candidate, strict=True) if c and not r["superseded_at"]]
    rewritten = set()
    if live:
        for r in await conn.fetch(FETCH_SENT_FORMS, tenant, session_id, live):
            if not await hashes_to([r["prev"]], dict(r["message"]), r["hash"]):
                rewritten.add(r["pos"])
    return [
        c and (r["superseded_at"] is not None or r["pos"] in rewritten)
        for r, c in zip(rows, candidate, strict=True)
    ]


async def fetch_unkept_cuts(
    conn: Executor, *, tenant: str, session_id: str, rows: Sequence[Any], spilled: Sequence[bool]
) -> list[bool]:
    """For each of ``rows`` (``messages.fetch_messages``'): whether it is a tool result cut at
    ingestion that ``spilled`` (:func:`fetch_spilled_cuts`) does not mark, one cut with no
    copy kept (``persistRaw`` off, or redacted): its body holds a cut marker and is not the
    message sent (its hash after the row before it, any of them for a superseded row), where
    a client's own text that looks like a marker was stored as sent."""
    maybe = [
        not s
        and decode(r["role"]) == "tool"
        and has_cut_marker(content_text(dict(r["message"]).get("content")))
        for r, s in zip(rows, spilled, strict=True)
    ]
    live = [r["pos"] for r, m in zip(rows, maybe, strict=True) if m and not r["superseded_at"]]
    gone = [r["id"] for r, m in zip(rows, maybe, strict=True) if m and r["superseded_at"]]
    sent: set[tuple[bool, int]] = set()  # (superseded, its id) or (live, its position)
    for r in await conn.fetch(FETCH_SENT_FORMS, tenant, session_id, live) if live else []:
        if await hashes_to([r["prev"]], dict(r["message"]), r["hash"]):
            sent.add((False, r["pos"]))
    for r in await conn.fetch(FETCH_SUPERSEDED, tenant, session_id, gone) if gone else []:
        if await hashes_to(list(r["prevs"]) or [""], dict(r["message"]), r["hash"]):
            sent.add((True, r["id"]))
    return [
        m and (bool(r["superseded_at"]), r["id"] if r["superseded_at"] else r["pos"]) not in sent
        for r, m in zip(rows, maybe, strict=True)
    ]


async def fetch_superseded_sent_forms(
    conn: Executor, *, tenant: str, session_id: str, ids: Sequence[int]
) -> dict[int, tuple[bool, dict[str, Any] | None]]:
    """Row id -> (cut?, the message as sent or None) for superseded tool result rows: a row
    whose stored body hashes, after one of the rows at the position before it, to its own
    hash was stored as sent (never cut; an evicted one's body); else it was cut, and its
    sent form is rebuilt from the spills under its id, those it replaced included, as a live
    row's is (None when none rebuilds it)."""
    if not ids:
        return {}
    rows = await conn.fetch(FETCH_SUPERSEDED, tenant, session_id, list(ids))
    out: dict[int, tuple[bool, dict[str, Any] | None]] = {}
    cut = []
    for r in rows:
        message, prevs = dict(r["message"]), list(r["prevs"]) or [""]
        if await hashes_to(prevs, message, r["hash"]):
            out[r["id"]] = (False, message)
        else:
            cut.append((r, prevs))
    spills: dict[str, list[tuple[datetime, str]]] = {}
    call_ids = sorted({r["tool_call_id"] for r, _ in cut})
    for s in await conn.fetch(FETCH_SPILLS, tenant, session_id, call_ids) if cut else []:
        spills.setdefault(s["tool_call_id"], []).append((s["created_at"], s["content"]))
    for r, prevs in cut:
        out[r["id"]] = (True, await _rebuilt(r, spills.get(r["tool_call_id"], []), prevs))
    return out
