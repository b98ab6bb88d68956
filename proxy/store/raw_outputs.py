"""``tool_raw_outputs``: the full (redacted-safe) text of spilled tool results.

A result cut at ingestion is spilled here. An evicted result needs no copy: its row keeps
the body beside the placeholder (migration 0008), and :func:`fetchrow_raw_output` reads it
from there, as it reads a result never cut from its message, when no spilled row is as new.
A pointer's handle (``cascade.pins.pin``: id and position) reads that row's own result
instead, as ``client_form`` rebuilds it: an id can name a newer result by then.

:func:`fetchval_version` names, without their text, every row that read depends on: the
messages stored under the id, the live row before the newest of them (whose hash its chain
hash continues), the live rows at a handle's position and the one before it, the spills
under the id (the newest and the ones it replaced) and the
``context.truncated`` events that name it. Each row is named by its key, its ``xmin``
(the transaction that wrote that row version: an update, such as an eviction or a
supersession, gives a row a new one) and its ``ctid`` (where that version lies: a
transaction that updates a row it wrote keeps the row's ``xmin``, but the new version
lies elsewhere while the old one can still be seen), the events by their count and newest
id, all of it digested to one short text. The events
count only while the newest row under an id is superseded, as they do for the read: for a
live one they decide nothing, and its supersession changes its ``xmin`` anyway, so a long
session's events are not scanned for every page. Two reads with the same version read the
same text, so a caller may keep the text it read under the version
(``services.raw_cache``) and page it again after this one small query, where reading it
anew reads and decodes the whole copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from proxy.cascade.handles import HANDLE
from proxy.cascade.lossless import is_compacted_from
from proxy.cascade.pins import pin, unpin
from proxy.cascade.text import content_text
from proxy.cascade.truncation import cap_utf8, is_cut_from, is_cut_from_capped
from proxy.cascade.types import Spill
from proxy.store import client_form
from proxy.store.nul import decode, encode

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = ["raw_rows", "fetch_first", "fetchrow_raw_output", "fetchval_version"]


def raw_rows(spills: Sequence[Spill], cap_bytes: int) -> list[tuple[str, str, int, bool]]:
    """(tool_call_id, content capped at ``cap_bytes`` UTF-8 bytes, original bytes, capped?),
    id and content through ``nul.encode`` (a text column holds no NUL)."""
    out = []
    for spill in spills:
        size = len(spill.text.encode("utf-8"))
        content = encode(cap_utf8(spill.text, cap_bytes))
        out.append((encode(spill.tool_call_id), content, size, size > cap_bytes))
    return out


_READ_COLUMNS = """
r.content, r.original_bytes, r.capped, r.created_at AS spilled_at,
       m.message, m.created_at, m.redacted, m.placeholder IS NOT NULL AS evicted,
       (r.created_at IS NULL OR r.created_at < m.created_at)
           AND m.placeholder IS NULL AND m.evicted_at IS NULL
           AND NOT m.redacted AND (m.superseded_at IS NULL OR NOT EXISTS (
               SELECT 1 FROM events e
               WHERE e.tenant = $1 AND e.session_id = $2 AND e.name = 'context.truncated'
                 AND e.data ->> 'tool_call_id' = $3 AND e.created_at >= m.created_at
           )) AS whole
       , m.hash, coalesce(p.hash, '') AS prev, m.superseded_at IS NULL AS live, m.pos
"""
_READ_FROM = """
FROM (SELECT) AS one
LEFT JOIN tool_raw_outputs r ON r.tenant = $1 AND r.session_id = $2 AND r.tool_call_id = $3
LEFT JOIN LATERAL (
    SELECT message, created_at, redacted, placeholder, evicted_at, pos, hash,
           superseded_at FROM messages
    WHERE tenant = $1 AND session_id = $2 AND tool_call_id = $3
    ORDER BY id DESC LIMIT 1
) AS m ON true
LEFT JOIN messages p ON p.tenant = $1 AND p.session_id = $2 AND p.pos = m.pos - 1
     AND p.superseded_at IS NULL
"""
FETCHROW_RAW_OUTPUT = "SELECT" + _READ_COLUMNS + _READ_FROM


async def fetchrow_raw_output(
    conn: Executor, *, tenant: str, session_id: str, tool_call_id: str
) -> dict[str, Any] | None:
    """The full text of a tool call's newest result (the newest message under the id,
    superseded or not): an id can come back (servers that number their calls ``call_0``
    each turn), and the model saw the newest result last, whose marker the live prompt
    holds. Its spilled row when that was written with or after the message (a result cut
    and spilled in one statement: the spill is the whole text); else the body of the
    message, evicted (kept beside its placeholder) or never cut (the whole of it). None
    when there is none, or when that result was cut or cleared with no copy kept
    (redacted, or cut with ``persistRaw`` off; its message holds less than the result): an
    older result under the id is not it. A pointer's handle (``pins.pin``,
    ``<id>@<position>``) reads the result at that position instead (``_fetch_pinned``),
    whatever came under the id since. A live result whose text is the proxy's own rewrite
    the client resent (an observation's, named by its handle) reads as the result that was
    rewritten (``_resent_cut``). A live result stored again after an edit before it (a
    new system prompt) keeps its older, identical spill: it reads as its position's pinned
    handle does. ``{"content", "original_bytes", "capped"}``; the text the client sent, NULs
    included (``nul``)."""
    pinned = unpin(tool_call_id)
    if pinned is not None:
        found = await _fetch_pinned(conn, tenant, session_id, *pinned)
        if found is not None:
            return found
    row = await conn.fetchrow(FETCHROW_RAW_OUTPUT, tenant, session_id, encode(tool_call_id))
    return await _read(conn, tenant, session_id, tool_call_id, row)


async def fetch_first(
    conn: Executor, *, tenant: str, session_id: str, tool_call_id: str
) -> tuple[str, dict[str, Any] | None]:
    """(:func:`fetchval_version`, :func:`fetchrow_raw_output`) in one statement where the
    read needs no other (a spill, or a body read by bare id): the version and the read's
    first query as one round trip (``FETCH_FIRST``), both from one snapshot. A pinned
    handle's own statements (``_fetch_pinned``) follow it, the version read first."""
    ids, pos = _version_args(tool_call_id)
    row = await conn.fetchrow(FETCH_FIRST, tenant, session_id, encode(tool_call_id), ids, pos)
    if row is None:  # never: the query always has its one row
        return "", None
    version = str(row["version"])
    pinned = unpin(tool_call_id)
    if pinned is not None:
        found = await _fetch_pinned(conn, tenant, session_id, *pinned)
        if found is not None:
            return version, found
    return version, await _read(conn, tenant, session_id, tool_call_id, row)


async def _read(
    conn: Executor, tenant: str, session_id: str, tool_call_id: str, row: Any
) -> dict[str, Any] | None:
    """What :func:`fetchrow_raw_output` makes of its first query's row."""
    if row is None:  # no row at all only without a session: the query always has one
        return None
    message_at = row["created_at"]
    if row["spilled_at"] is not None and (message_at is None or row["spilled_at"] >= message_at):
        return {
            "content": decode(row["content"]),
            "original_bytes": row["original_bytes"],
            "capped": row["capped"],
        }
    if message_at is None:
        return None
    if not (await _sent(row) or (row["evicted"] and not row["redacted"])):
        if row["live"] and not row["redacted"]:  # a cut result stored again, its spill older
            return await _fetch_pinned(conn, tenant, session_id, tool_call_id, row["pos"])
        return None
    whole = _whole(row["message"])
    if row["live"] and not row["evicted"] and HANDLE in whole["content"]:
        return await _resent_cut(conn, tenant, session_id, tool_call_id, row["pos"], whole)
    return whole


async def _sent(row: Any) -> bool:
    """Whether the row's stored body is the whole result: nothing took its place (``whole``:
    no spill as new as it, no placeholder or redaction), and nothing cut it. A row the
    overflow guard trimmed qualifies: the trim only keeps it out of later prompts and leaves
    its body as stored, and a ``<related_context>`` snippet of it names its id for
    ``read_tool_output`` to page (``cascade.retrieval``). A live
    row's chain hash tells the last alone: it is over the message the client sent, and a
    cut row holds the cut form (``client_form``), in a branch too, which copies rows but
    not events. A superseded row's previous live row may not be the one its hash continues,
    so for it ``whole`` asks the ``context.truncated`` events instead (a long body is hashed
    off the event loop: ``client_form.hashes_to``)."""
    if not row["whole"]:
        return False
    if not row["live"]:
        return True
    return await client_form.hashes_to([row["prev"]], row["message"], row["hash"])


def _whole(message: Any) -> dict[str, Any]:
    """A stored message's own text as the whole result: nothing of it was cut."""
    text = content_text(message.get("content"))
    return {"content": text, "original_bytes": len(text.encode("utf-8")), "capped": False}


# The live row at a position, and the capped spills under its id (the newest, and the
# ones it replaced): a cut result whose spill was capped has no sent form to rebuild.
FETCH_CAPPED = """
SELECT m.message, s.content, s.original_bytes
FROM messages m
JOIN (
    SELECT content, original_bytes, created_at FROM tool_raw_outputs
    WHERE tenant = $1 AND session_id = $2 AND tool_call_id = $3 AND capped
    UNION ALL
    SELECT content, original_bytes, created_at FROM tool_raw_output_versions
    WHERE tenant = $1 AND session_id = $2 AND tool_call_id = $3 AND capped
) AS s ON true
WHERE m.tenant = $1 AND m.session_id = $2 AND m.pos = $4 AND m.superseded_at IS NULL
  AND m.tool_call_id = $3 AND NOT m.redacted
ORDER BY abs(extract(epoch FROM s.created_at - m.created_at))
"""


async def _fetch_pinned(
    conn: Executor, tenant: str, session_id: str, tool_call_id: str, pos: int
) -> dict[str, Any] | None:
    """What the bare read gives for the live tool result at ``pos`` when its id is
    ``tool_call_id``, whatever came under the id since: its whole text as sent
    (``client_form``: never cut, evicted, or rebuilt from its own spill); else, cut with its
    spill capped, that spill as stored (``capped``), the one its cut agrees with
    (``truncation.is_cut_from_capped``), the spill written with it tried first. None when
    there is no such row or its text is not kept (redacted, or cut with no spill).

    A client that resends the history as stored (``GET …/messages``, not ``?form=sent``)
    sends a cut result back as the proxy cut it: its row then holds that cut text as sent,
    and its marker names this very handle. The handle still reads the result the cut was
    made from (the spill under the id that the text is a cut of), not the cut text, whose
    marker would send the model to the same offsets again."""
    sent = await client_form.fetch_sent_forms(
        conn, tenant=tenant, session_id=session_id, positions=[pos]
    )
    msg = sent.get(pos)
    if msg is not None:
        if msg.get("role") != "tool" or msg.get("tool_call_id") != tool_call_id:
            return None
        whole = _whole(msg)
        if HANDLE in whole["content"]:
            return await _resent_cut(conn, tenant, session_id, tool_call_id, pos, whole)
        return whole
    rows = await conn.fetch(FETCH_CAPPED, tenant, session_id, encode(tool_call_id), pos)
    for row in rows:
        cut, capped = content_text((row["message"] or {}).get("content")), decode(row["content"])
        if is_cut_from_capped(cut, capped):
            return {"content": capped, "original_bytes": row["original_bytes"], "capped": True}
    return None


# The bodies of the superseded results at a position that were evicted: a client that resent
# the history as stored resent the placeholder, which then names a body kept here.
FETCH_EVICTED_AT = """
SELECT message, placeholder FROM messages
WHERE tenant = $1 AND session_id = $2 AND pos = $3 AND tool_call_id = $4
  AND superseded_at IS NOT NULL AND placeholder IS NOT NULL AND NOT redacted
ORDER BY id DESC
"""


async def _resent_cut(
    conn: Executor, tenant: str, session_id: str, tool_call_id: str, pos: int, whole: dict[str, Any]
) -> dict[str, Any]:
    """``whole`` (a live result as sent, holding a handle), or the result the proxy's text in
    it was made from when the client resent that text: an evicted body the placeholder
    stood for (a superseded row at the position, its placeholder this text), or the
    uncapped spill under the id the text was cut from (``truncation.is_cut_from``) or
    compacted from under this very handle (``lossless.is_compacted_from``)."""
    text, handle = whole["content"], pin(tool_call_id, pos)
    ids = [encode(tool_call_id)]
    for row in await conn.fetch(FETCH_EVICTED_AT, tenant, session_id, pos, ids[0]):
        if content_text((row["placeholder"] or {}).get("content")) == text:
            text = content_text((row["message"] or {}).get("content"))
            whole = {"content": text, "original_bytes": len(text.encode("utf-8")), "capped": False}
            break
    for spill in await conn.fetch(client_form.FETCH_SPILLS, tenant, session_id, ids):
        raw = decode(spill["content"])
        if is_cut_from(text, raw) or is_compacted_from(text, raw, handle):
            return {"content": raw, "original_bytes": len(raw.encode("utf-8")), "capped": False}
    return whole


# The messages are read in one pass (``rows``), by the index on tool_call_id (migration
# 0031) and by position. A bare id has no position: -1 matches no row, where a NULL one
# makes the position's arm false, which the planner may answer with any partial index
# (the session's evicted rows, ``messages_evicted``).
_VERSION_ROWS = """
rows AS MATERIALIZED (
    SELECT id, xmin, ctid, tool_call_id, superseded_at, pos FROM messages
    WHERE tenant = $1 AND session_id = $2 AND (tool_call_id = ANY($IDS::text[])
          OR (superseded_at IS NULL AND pos IN (coalesce($POS, -1), coalesce($POS, -1) - 1)))
)
"""
_VERSION = """
encode(sha256(convert_to(concat_ws('|',
    (SELECT string_agg(id::text || ':' || xmin::text || ctid::text, ',' ORDER BY id) FROM rows),
    (SELECT id::text || ':' || xmin::text || ctid::text FROM messages
     WHERE tenant = $1 AND session_id = $2 AND superseded_at IS NULL AND pos = (
         SELECT pos - 1 FROM rows WHERE tool_call_id = ($IDS::text[])[1]
         ORDER BY id DESC LIMIT 1)),
    (SELECT string_agg(tool_call_id || ':' || created_at::text || ':' || xmin::text
                       || ctid::text, ',' ORDER BY tool_call_id)
     FROM tool_raw_outputs
     WHERE tenant = $1 AND session_id = $2 AND tool_call_id = ANY($IDS::text[])),
    (SELECT string_agg(tool_call_id || ':' || created_at::text || ':' || xmin::text
                       || ctid::text, ',' ORDER BY tool_call_id, created_at, replaced_at)
     FROM tool_raw_output_versions
     WHERE tenant = $1 AND session_id = $2 AND tool_call_id = ANY($IDS::text[])),
    (SELECT count(*)::text || ':' || coalesce(max(id), 0)::text FROM events
     WHERE tenant = $1 AND session_id = $2 AND name = 'context.truncated'
       AND data ->> 'tool_call_id' = ANY($IDS::text[])
       AND EXISTS (
           SELECT 1 FROM (
               SELECT DISTINCT ON (tool_call_id) superseded_at FROM rows
               WHERE tool_call_id = ANY($IDS::text[])
               ORDER BY tool_call_id, id DESC
           ) AS newest
           WHERE newest.superseded_at IS NOT NULL))), 'UTF8')), 'hex')
"""


def _with_version(ids: str, pos: str, columns: str = "", rest: str = "") -> str:
    """A statement that selects the version (its ids the array parameter ``ids``, its
    position ``pos``), then ``columns`` and ``rest``: the version is written once, for
    ``FETCH_VERSION`` and ``FETCH_FIRST``."""
    text = "WITH" + _VERSION_ROWS + "SELECT" + _VERSION + columns + rest
    return text.replace("$IDS", ids).replace("$POS", pos)


FETCH_VERSION = _with_version("$3", "$4")
# The version, then the read's first query's row ($3 the id, as in FETCHROW_RAW_OUTPUT).
FETCH_FIRST = _with_version("$4", "$5", "AS version," + _READ_COLUMNS, _READ_FROM)


async def fetchval_version(
    conn: Executor, *, tenant: str, session_id: str, tool_call_id: str
) -> str:
    """The version of the rows ``fetchrow_raw_output`` reads for ``tool_call_id`` (a bare id
    or a pinned handle, whose id part and its bare form both count): the SHA-256 of the
    rows' names in hex, equal for two reads exactly when none of those rows was written,
    changed or deleted between them (module docstring). A digest, read for every page:
    an id a server uses every turn (``call_0``) has a row under it per turn. It sits
    beside the read: a row the read comes to depend on belongs in it too, and
    ``test_raw_version_rows`` changes each row of the session's tables in turn to find one
    that changes the read but not the version."""
    return str(await conn.fetchval(FETCH_VERSION, tenant, session_id, *_version_args(tool_call_id)))


def _version_args(tool_call_id: str) -> tuple[list[str], int | None]:
    """The ids whose rows the version names (a pinned handle's id part too) and its position."""
    ids = [encode(tool_call_id)]
    pinned = unpin(tool_call_id)
    if pinned is not None:
        ids.append(encode(pinned[0]))
    return ids, pinned[1] if pinned is not None else None
