"""The version of what ``raw_outputs.fetchrow_raw_output`` reads for an id, without its text.

``fetchrow_raw_output`` decides which text an id (or a pinned handle) names from the rows
under the id: the messages stored under it, the live rows at a handle's position and the one
before it, the spills under it (the newest and the ones it replaced) and the
``context.truncated`` events that name it. Every such row is named here by its key and its
``xmin`` (the transaction that wrote that row version: an update, such as an eviction or a
supersession, gives a row a new one), and the events by their count and newest id. The
events count only while the newest row under an id is superseded, as they do for the read:
for a live one they decide nothing, and its supersession changes its ``xmin`` anyway, so a
long session's events are not scanned for every page. Two reads
with the same version read the same text, so a caller may keep the text it read under the
version (``services.raw_cache``) and page it again after this one small query, where
reading it anew reads and decodes the whole copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.cascade.pins import unpin
from proxy.store.nul import encode

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = ["fetchval_version"]

FETCH_VERSION = """
SELECT concat_ws('|',
    (SELECT string_agg(id::text || ':' || xmin::text, ',' ORDER BY id) FROM messages
     WHERE tenant = $1 AND session_id = $2 AND (tool_call_id = ANY($3::text[])
           OR (superseded_at IS NULL AND pos IN ($4, $4 - 1)))),
    (SELECT string_agg(tool_call_id || ':' || created_at::text || ':' || xmin::text, ','
                       ORDER BY tool_call_id) FROM tool_raw_outputs
     WHERE tenant = $1 AND session_id = $2 AND tool_call_id = ANY($3::text[])),
    (SELECT string_agg(tool_call_id || ':' || created_at::text || ':' || xmin::text, ','
                       ORDER BY tool_call_id, created_at, replaced_at)
     FROM tool_raw_output_versions
     WHERE tenant = $1 AND session_id = $2 AND tool_call_id = ANY($3::text[])),
    (SELECT count(*)::text || ':' || coalesce(max(id), 0)::text FROM events
     WHERE tenant = $1 AND session_id = $2 AND name = 'context.truncated'
       AND data ->> 'tool_call_id' = ANY($3::text[])
       AND EXISTS (
           SELECT 1 FROM (
               SELECT DISTINCT ON (tool_call_id) superseded_at FROM messages
               WHERE tenant = $1 AND session_id = $2 AND tool_call_id = ANY($3::text[])
               ORDER BY tool_call_id, id DESC
           ) AS newest
           WHERE newest.superseded_at IS NOT NULL)))
"""


async def fetchval_version(
    conn: Executor, *, tenant: str, session_id: str, tool_call_id: str
) -> str:
    """The version of the rows ``fetchrow_raw_output`` reads for ``tool_call_id`` (a bare id
    or a pinned handle, whose id part and its bare form both count): a short text, equal
    for two reads exactly when none of those rows was written, changed or deleted between
    them (module docstring)."""
    ids = [encode(tool_call_id)]
    pinned = unpin(tool_call_id)
    if pinned is not None:
        ids.append(encode(pinned[0]))
    pos = pinned[1] if pinned is not None else None
    return str(await conn.fetchval(FETCH_VERSION, tenant, session_id, ids, pos))
