"""The ``events`` table: persisted ``context.*`` events, replayed after ``Last-Event-ID``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg

__all__ = ["insert_event", "fetch_events_after", "NOTIFY_CHANNEL", "notify"]

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
