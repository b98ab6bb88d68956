"""The ``events`` table: persisted ``context.*`` events, replayed after ``Last-Event-ID``."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import asyncpg

from proxy.store.nul import encode_json

if TYPE_CHECKING:
    from datetime import datetime

    from proxy.store.db import Executor

__all__ = [
    "insert_claimed_event",
    "EventRows",
    "events_cte",
    "event_columns",
    "event_objects",
    "insert_event",
    "fetch_events_after",
    "fetch_resume",
    "fetch_session_events_after",
    "NOTIFY_CHANNEL",
    "notify",
    "notify_all",
    "fetch_watched",
    "watch",
    "unwatch",
    "fetch_unpaired_compactions",
    "fetch_sessions_with_unpaired_compactions",
    "count_failed_run",
]

NOTIFY_CHANNEL = "cascade_events"
"""Migration 0002's trigger NOTIFYs every inserted event here; transient ones are sent here."""

EventRows = tuple[Sequence[str], Sequence[Mapping[str, Any]]]
"""(names, data) of persisted events, in order, ready to be passed as two array parameters."""


def events_cte(names: str, data: str) -> str:
    """The INSERT of a request's events, to embed as a data-modifying CTE in a statement the
    request runs anyway (``$1``/``$2`` must be tenant and session; ``names``/``data`` name
    the array parameters). The trigger announces each row, in order, at commit."""
    return (
        "INSERT INTO events (tenant, session_id, name, data) SELECT $1, $2, n, d FROM "
        f"unnest({names}::text[], {data}::jsonb[]) WITH ORDINALITY AS t(n, d, o) ORDER BY o"
    )


def event_columns(
    events: EventRows,
) -> tuple[list[str], list[dict[str, Any]]] | tuple[None, None]:
    """``events`` as the two array parameters ``events_cte`` unnests (names, data); NULLs
    when there are none, as most requests have (see ``messages._raw_objects``). Each body's
    strings go through ``nul.encode_json``: a jsonb string refuses ``\\u0000``."""
    if not events[0]:
        return None, None
    return list(events[0]), [encode_json(d) for d in events[1]]


def event_objects(events: EventRows) -> list[dict[str, Any]] | None:
    """``events`` as the json array of {name, data} objects ``cascade_append_v2`` expands;
    NULL when there are none. The strings go through ``nul.encode_json``, as in
    ``event_columns``: each body becomes jsonb in the events table."""
    if not events[0]:
        return None
    return [{"name": n, "data": encode_json(d)} for n, d in zip(events[0], events[1], strict=True)]


INSERT_EVENT = """
INSERT INTO events (tenant, session_id, name, data) VALUES ($1, $2, $3, $4) RETURNING id
"""


# A compaction's started event, written only while ``$5`` holds the session's compaction
# claim. The session row's lock orders it against a claim passing to another compaction
# (its lease expired): either the claim passes first and nothing is written, or the event
# commits first and is the latest started one the next compaction's look closes. Written
# after the claim passed, it would follow that compaction's own started event unpaired,
# where no look reads.
INSERT_CLAIMED_EVENT = """
INSERT INTO events (tenant, session_id, name, data)
SELECT $1::text, $2::text, $3::text, $4::jsonb WHERE EXISTS (
    SELECT 1 FROM sessions WHERE tenant = $1 AND id = $2 AND compaction_owner = $5 FOR SHARE)
RETURNING id
"""


async def insert_event(
    conn: Executor, *, tenant: str, session_id: str, name: str, data: Mapping[str, Any]
) -> int:
    """Persist one event (the trigger NOTIFYs listeners); returns its id. Its strings go
    through ``nul.encode_json``, as in ``event_columns``."""
    return int(await conn.fetchval(INSERT_EVENT, tenant, session_id, name, encode_json(data)))


async def insert_claimed_event(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    owner: uuid.UUID,
    name: str,
    data: Mapping[str, Any],
) -> int | None:
    """Persist one event of a compaction that holds the session's claim as ``owner``;
    None, nothing written, when it no longer does (its lease expired and another
    compaction claimed the session, or the session was deleted)."""
    row_id = await conn.fetchval(
        INSERT_CLAIMED_EVENT, tenant, session_id, name, encode_json(data), owner
    )
    return None if row_id is None else int(row_id)


FETCH_EVENTS_AFTER = """
SELECT id, name, data, created_at < now() - make_interval(secs => $5) AS settled
FROM events WHERE tenant = $1 AND session_id = $2 AND id > $3
ORDER BY id LIMIT $4
"""


async def fetch_events_after(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    after_id: int,
    limit: int = 1000,
    settle_seconds: float = 10.0,
) -> list[asyncpg.Record]:
    """Events after ``after_id`` in id order; ``settled`` says a row is older than
    ``settle_seconds`` by the database's clock (see ``api.events``). ``data`` is as stored:
    ``nul.decode_json`` gives back the body that was published."""
    return await conn.fetch(FETCH_EVENTS_AFTER, tenant, session_id, after_id, limit, settle_seconds)


FETCH_RESUME = """
SELECT s.created_at,
       (SELECT max(id) FROM events WHERE tenant = $1 AND session_id = $2) AS last,
       (SELECT max(id) FROM events WHERE tenant = $1 AND session_id = $2 AND id <= $3
          AND created_at < now() - make_interval(secs => $4)) AS settled
FROM sessions s WHERE s.tenant = $1 AND s.id = $2
"""


async def fetch_resume(
    conn: Executor, *, tenant: str, session_id: str, after_id: int, settle_seconds: float
) -> tuple[datetime, int, int] | None:
    """Where a stream opened after ``after_id`` starts, in the statement that finds its
    session (None: no such session): the session's ``created_at``, the id of its last event,
    and of its last event up to ``after_id`` older than ``settle_seconds`` (as ``settled``
    in :func:`fetch_events_after`), 0 for none."""
    row = await conn.fetchrow(FETCH_RESUME, tenant, session_id, after_id, settle_seconds)
    if row is None:
        return None
    return row["created_at"], int(row["last"] or 0), int(row["settled"] or 0)


FETCH_SESSION_EVENTS_AFTER = """
SELECT s.agent, e.id, e.name, e.data,
       e.created_at < now() - make_interval(secs => $5) AS settled
FROM sessions s LEFT JOIN LATERAL (
    SELECT id, name, data, created_at FROM events
    WHERE tenant = $1 AND session_id = $2 AND id > $3 ORDER BY id LIMIT $4
) e ON true
WHERE s.tenant = $1 AND s.id = $2 AND s.created_at = $6
ORDER BY e.id
"""


async def fetch_session_events_after(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    after_id: int,
    created_at: datetime,
    limit: int = 1000,
    settle_seconds: float = 10.0,
) -> tuple[str | None, list[asyncpg.Record]] | None:
    """The session's agent and :func:`fetch_events_after`, or None when the session no
    longer exists: an open stream's periodic read also learns that its session was deleted,
    should the bus's word of it not reach it, and which agent runs it, which a proxy key
    limited to some agents is held to (``api.events``), in the same statement.

    ``created_at`` is the session's as the stream found it when it opened: a session made
    again under the same id since (the delete unheard, the id reused before this read) has
    another, and counts as gone too, so the stream does not carry on into its events. The
    column is ``now()`` when the row is made (never updated): a session made again under
    the id is made after the old one was, so it has a later one."""
    rows = await conn.fetch(
        FETCH_SESSION_EVENTS_AFTER, tenant, session_id, after_id, limit, settle_seconds, created_at
    )
    if not rows:
        return None
    return rows[0]["agent"], [r for r in rows if r["id"] is not None]


async def notify(conn: Executor, *, payload: str) -> None:
    await conn.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, payload)


async def notify_all(conn: Executor, *, payloads: Sequence[str]) -> None:
    """NOTIFY several payloads in one statement, in order (one round trip)."""
    await conn.execute(
        "SELECT pg_notify($1, x) FROM unnest($2::text[]) AS x", NOTIFY_CHANNEL, payloads
    )


FETCH_WATCHED = """
SELECT DISTINCT tenant, session_id FROM event_watchers WHERE replica <> $1 AND expires_at > now()
"""


async def fetch_watched(conn: Executor, *, replica: uuid.UUID) -> set[tuple[str, str]]:
    """The sessions other replicas stream now (their current ``event_watchers`` rows)."""
    return {(r["tenant"], r["session_id"]) for r in await conn.fetch(FETCH_WATCHED, replica)}


WATCH = """
INSERT INTO event_watchers (tenant, session_id, replica, expires_at)
SELECT t, s, $3, now() + make_interval(secs => $4) FROM unnest($1::text[], $2::text[]) AS k(t, s)
ON CONFLICT (tenant, session_id, replica) DO UPDATE SET expires_at = EXCLUDED.expires_at
"""


async def watch(
    conn: Executor, *, keys: Sequence[tuple[str, str]], replica: uuid.UUID, ttl_seconds: float
) -> None:
    """Say (or say again) that ``replica`` streams these sessions for the next ``ttl``:
    the events trigger announces their events only while such a row is current."""
    if keys:
        await conn.execute(WATCH, [k[0] for k in keys], [k[1] for k in keys], replica, ttl_seconds)


UNWATCH = """
DELETE FROM event_watchers WHERE tenant = $1 AND session_id = $2 AND replica = $3
"""


async def unwatch(conn: Executor, *, tenant: str, session_id: str, replica: uuid.UUID) -> None:
    await conn.execute(UNWATCH, tenant, session_id, replica)


# A compaction's started event and its partner (completed or failed) are written by one
# compaction, which holds the session's compaction lock throughout, so a session's
# compaction events alternate: started, partner, started, partner. A partner that names a
# started event (``started_id``: one written later, by the sweep below) is that one's alone:
# the sweep's for the first of two in a row comes after the second, and its position would
# pair that one too. A partner that names none (an older version's, or the compaction's
# own) pairs the nearest started event before it that no partner names and no nearer
# partner took: an older version's two started events in a row can be followed by both
# their partners. A started event with neither is unpaired. The name conditions match
# migration 0012's partial index, which every probe here goes through.

# Each compaction closes the unpaired started event of its session (under its claim) before
# it writes its own, which it writes only while it still holds the claim
# (INSERT_CLAIMED_EVENT), so only the latest one can be unpaired: the look a compaction makes
# reads that one and the few events after it, however many compactions the session ran.
# Older ones in a row are an older version's; the start-up sweep (retried until the
# database answers) reads and closes them all.
#
# The latest started event has no next one, so any partner after it that names no other
# started event pairs it. The partner is looked for in the session's index order, the first
# one only: the LIMIT in a subquery of its own (EXISTS drops its own LIMIT) keeps the
# planner from a hashed read of every compaction event of the table, as it plans an anti
# join with the table's statistics.
FETCH_UNPAIRED_COMPACTIONS = """
SELECT s.id, s.data FROM (
    SELECT id, data FROM events
    WHERE tenant = $1 AND session_id = $2 AND name = 'context.compaction.started'
    ORDER BY id DESC LIMIT 1) s
WHERE NOT EXISTS (
    SELECT 1 FROM (
        SELECT 1 FROM events e
        WHERE e.tenant = $1 AND e.session_id = $2 AND e.id > s.id
          AND e.name IN ('context.compaction.completed', 'context.compaction.failed')
          AND coalesce(e.data->>'started_id' = s.id::text, true)
        ORDER BY e.id LIMIT 1) p)
"""


def _swept(where: str) -> str:
    """The unpaired started events of the sessions ``where`` names, in two sorts of their
    compaction events and no join (a join's plan on a table without statistics reads them
    once per started event). A started event a later partner names is paired: partners
    naming it share its ``key``. The others and the partners naming none pair as brackets
    do, each partner closing the latest started event still open before it: ``walk`` counts
    started events less partners, ``depth`` is that floored at 0 (a partner with none open
    closes nothing), and a started event is closed when the depth falls below its own after
    it. The first partner after a started event is not enough: two started events in a row
    and then their two partners (a compaction whose lease expired writing after the next
    one, in an older version) pair both."""
    return f"""
WITH k AS (
    SELECT tenant, session_id, id, name, data,
           max(id) FILTER (WHERE name <> 'context.compaction.started'
                             AND data->>'started_id' IS NOT NULL)
               OVER (PARTITION BY tenant, session_id,
                     CASE WHEN name = 'context.compaction.started' THEN id::text
                          ELSE coalesce(data->>'started_id', id::text) END) AS named_by
    FROM events
    WHERE {where} AND name IN ('context.compaction.started', 'context.compaction.completed',
                               'context.compaction.failed')
), c AS (
    SELECT tenant, session_id, id, name, data,
           sum(CASE WHEN name = 'context.compaction.started' THEN 1 ELSE -1 END)
               OVER (PARTITION BY tenant, session_id ORDER BY id) AS walk
    FROM k
    WHERE CASE WHEN name = 'context.compaction.started' THEN coalesce(named_by < id, true)
               ELSE data->>'started_id' IS NULL END
), d AS (
    SELECT tenant, session_id, id, name, data,
           walk - least(0, min(walk) OVER (PARTITION BY tenant, session_id ORDER BY id)) AS depth
    FROM c
)
SELECT tenant, session_id, id, data FROM (
    SELECT tenant, session_id, id, name, data, depth,
           min(depth) OVER (PARTITION BY tenant, session_id ORDER BY id
                            ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS floor
    FROM d) s
WHERE name = 'context.compaction.started' AND depth <= floor
"""


FETCH_EVERY_UNPAIRED_COMPACTION = f"""
SELECT id, data FROM ({_swept("tenant = $1 AND session_id = $2")}) u ORDER BY id
"""


async def fetch_unpaired_compactions(
    conn: Executor, *, tenant: str, session_id: str, every: bool = False
) -> list[asyncpg.Record]:
    """The session's context.compaction.started events that have no partner, in order
    (``data`` as stored: see ``fetch_events_after``): of its latest one only, unless
    ``every`` (the start-up sweep's)."""
    sql = FETCH_EVERY_UNPAIRED_COMPACTION if every else FETCH_UNPAIRED_COMPACTIONS
    return await conn.fetch(sql, tenant, session_id)


FETCH_SESSIONS_WITH_UNPAIRED_COMPACTIONS = f"""
SELECT DISTINCT tenant, session_id FROM ({_swept("true")}) u
"""


async def fetch_sessions_with_unpaired_compactions(conn: Executor) -> list[tuple[str, str]]:
    """(tenant, session_id) of every session with an unpaired started event."""
    rows = await conn.fetch(FETCH_SESSIONS_WITH_UNPAIRED_COMPACTIONS)
    return [(r["tenant"], r["session_id"]) for r in rows]


FETCH_RECENT_OUTCOMES = """
SELECT name = 'context.compaction.failed' FROM events
WHERE tenant = $1 AND session_id = $2
  AND name IN ('context.compaction.completed', 'context.compaction.failed')
  AND (name = 'context.compaction.completed' OR data->>'reason' = 'summary_failed')
ORDER BY id DESC LIMIT $3
"""


async def count_failed_run(conn: Executor, *, tenant: str, session_id: str, limit: int = 8) -> int:
    """How many of the session's latest compactions failed as ``summary_failed`` in a row
    (since its last completed one), counting at most ``limit``: the backoff grows with it."""
    failed = [r[0] for r in await conn.fetch(FETCH_RECENT_OUTCOMES, tenant, session_id, limit)]
    return next((i for i, f in enumerate(failed) if not f), len(failed))
