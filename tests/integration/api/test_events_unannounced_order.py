"""An event committed before a later one, but whose announcement the stream's registration
missed (its trigger ran just before the registration committed, as when a client reconnects
in the middle of a turn), still comes before that later one: otherwise a reconnect with the
later one's id, in the moment before the next catch-up, would skip it for good."""

from __future__ import annotations

import asyncpg

from proxy.settings import Settings
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_events import chat, is_usage, open_events, user
from tests.integration.conftest import run_sync

INSERT = (
    "INSERT INTO events (tenant, session_id, name, data) SELECT tenant, id, $2, "
    "jsonb_build_object('session_id', id) FROM sessions WHERE id = $1 RETURNING id"
)


async def _write(dsn: str, sid: str, replica: str) -> tuple[int, int]:
    """Event ``test.unheard`` while the session has no watcher row (no NOTIFY), then, the
    row back, ``test.heard`` (announced): both committed, in that order."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("DELETE FROM event_watchers WHERE session_id = $1 RETURNING *", sid)
        unheard = int(await conn.fetchval(INSERT, sid, "test.unheard"))
        await conn.executemany(
            "INSERT INTO event_watchers (tenant, session_id, replica, expires_at)"
            " VALUES ($1, $2, $3, $4)",
            [tuple(r) for r in rows],
        )
        assert [str(r["replica"]) for r in rows] == [replica]
        heard = int(await conn.fetchval(INSERT, sid, "test.heard"))
        return unheard, heard
    finally:
        await conn.close()


def test_an_unannounced_event_comes_before_a_later_announced_one(
    proxy: ProxyServer, settings: Settings
) -> None:
    assert settings.database_url is not None
    chat(proxy.origin, "unheard", [user("u1")])
    with open_events(proxy.origin, "unheard") as events:
        events.until(is_usage)
        replica = str(proxy.state("bus").replica)
        unheard, heard = run_sync(_write(settings.database_url, "unheard", replica))
        got = events.take(2)
    assert [(f.event, int(f.id or 0)) for f in got] == [
        ("test.unheard", unheard),
        ("test.heard", heard),
    ]
