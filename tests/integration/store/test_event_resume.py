"""Where a stream resumed after a client's Last-Event-ID starts (``events.fetch_resume``): the
session's last settled event at or below that id, the tenant's own, so that an id below the
client's that commits late (two writers) is above the stream's mark and still sent."""

from __future__ import annotations

from typing import Any

from proxy.store import events
from tests.integration.store.helpers import S, T, create_session

OTHER = "t-other-tenant"


async def _event(conn: Any, tenant: str, *, settled: bool) -> int:
    """One event of the tenant's session ``S``; ``settled``: written a minute ago."""
    event_id = await events.insert_event(conn, tenant=tenant, session_id=S, name="n", data={})
    if settled:
        await conn.execute(
            "UPDATE events SET created_at = now() - interval '1 minute' WHERE id = $1", event_id
        )
    return event_id


async def test_the_resume_starts_at_the_tenants_last_settled_event_up_to_the_clients_id(
    conn: Any,
) -> None:
    await create_session(conn, tenant=OTHER, session_id=S, agent="default", model="m")
    floor = await _event(conn, T, settled=True)
    await _event(conn, T, settled=False)
    await _event(conn, OTHER, settled=True)  # another tenant's session under the same id
    had = await _event(conn, T, settled=False)  # the client's Last-Event-ID
    last = await _event(conn, T, settled=True)  # past the client's id: not a place to start

    async def resume(after_id: int, session_id: str = S) -> Any:
        found = await events.fetch_resume(
            conn, tenant=T, session_id=session_id, after_id=after_id, settle_seconds=10.0
        )
        return found and found[1:]

    assert await resume(had) == (last, floor)
    assert await resume(floor - 1) == (last, 0)  # nothing settled up to it
    assert await resume(0) == (last, 0)  # a stream opened without an id
    assert await resume(had, "no-such-session") is None
