"""The ``events`` table: persisted ``context.*`` events, replayed after ``Last-Event-ID``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg

__all__ = [
    "insert_and_notify", "publish_many", "fetch_events_after", "NOTIFY_CHANNEL",
    "notify",
]

NOTIFY_CHANNEL = "cascade_events"

INSERT_AND_NOTIFY = """
WITH e AS (
    INSERT INTO events (tenant, session_id, name, data) VALUES ($1, $2, $3, $4) RETURNING id
)
SELECT e.id, pg_notify($5, CASE WHEN length($6::text) + 400 > $7 THEN
        json_build_object('t', $1::text, 's', $2::text, 'n', $3::text, 'i', e.id, 'd', NULL)::text
    ELSE
        json_build_object('t', $1::text, 's', $2::text, 'n', $3::text, 'i', e.id,
                          'd', $4::jsonb)::text
    END)
FROM e
"""


async def insert_and_notify(
    conn: Any, *, tenant: str, session_id: str, name: str, data: Mapping[str, Any],
    encoded: str, max_payload: int,
) -> int:
    """Persist an event and NOTIFY listeners in one round trip; returns the event id.

    A payload over ``max_payload`` bytes carries only the id; listeners read the row back.
    """
    return int(await conn.fetchval(
        INSERT_AND_NOTIFY, tenant, session_id, name, dict(data), NOTIFY_CHANNEL, encoded,
        max_payload,
    ))


PUBLISH_MANY = """
WITH e AS (
    INSERT INTO events (tenant, session_id, name, data)
    SELECT $1, $2, n, d FROM unnest($3::text[], $4::jsonb[]) WITH ORDINALITY AS t(n, d, o)
    ORDER BY o
    RETURNING id, name, data
)
SELECT e.id, pg_notify($5, json_build_object('t', $1::text, 's', $2::text, 'n', e.name,
        'i', e.id, 'd', CASE WHEN octet_length(e.data::text) + 400 > $6 THEN NULL
                        ELSE e.data END)::text)
FROM e
UNION ALL
SELECT NULL, pg_notify($5, x) FROM unnest($7::text[]) AS x
"""


async def publish_many(
    conn: Any, *, tenant: str, session_id: str,
    persisted: Sequence[tuple[str, Mapping[str, Any]]], transient: Sequence[str],
    max_payload: int,
) -> None:
    """Persist and NOTIFY a request's events in one round trip, in order.

    ``transient`` are ready NOTIFY payloads of events that are never stored.
    """
    if persisted or transient:
        await conn.execute(
            PUBLISH_MANY, tenant, session_id, [n for n, _ in persisted],
            [dict(d) for _, d in persisted], NOTIFY_CHANNEL, max_payload, list(transient),
        )


FETCH_EVENTS_AFTER = """
SELECT id, name, data FROM events WHERE tenant = $1 AND session_id = $2 AND id > $3
ORDER BY id LIMIT $4
"""


async def fetch_events_after(
    conn: Any, *, tenant: str, session_id: str, after_id: int, limit: int = 1000
) -> list[asyncpg.Record]:
    return await conn.fetch(FETCH_EVENTS_AFTER, tenant, session_id, after_id, limit)


async def notify(conn: Any, *, payload: str) -> None:
    await conn.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, payload)
