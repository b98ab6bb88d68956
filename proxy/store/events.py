"""The ``events`` table: persisted ``context.*`` events, replayed after ``Last-Event-ID``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg

__all__ = ["insert_event", "insert_and_notify", "fetch_events_after", "NOTIFY_CHANNEL", "notify"]

NOTIFY_CHANNEL = "cascade_events"

INSERT_EVENT = """
INSERT INTO events (tenant, session_id, name, data) VALUES ($1, $2, $3, $4)
RETURNING id, created_at
"""


async def insert_event(
    conn: Any, *, tenant: str, session_id: str, name: str, data: Mapping[str, Any]
) -> asyncpg.Record:
    row = await conn.fetchrow(INSERT_EVENT, tenant, session_id, name, dict(data))
    assert row is not None
    return row


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
