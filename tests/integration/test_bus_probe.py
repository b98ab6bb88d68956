"""The event bus's probe of its listening connection (``bus.PROBE_EVERY``): a probe that
fails in a way the bus does not expect (an ``asyncpg`` client error: neither an answer, a
timeout nor a closed connection) ends that listener before another is opened; left open
and listening, it handed every notification to the session's streams a second time."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from proxy import bus as bus_module
from proxy.bus import EventBus
from proxy.cascade.types import USAGE
from tests.integration.store.helpers import create_session


async def test_a_probe_failing_unexpectedly_leaves_one_listener(
    pool: asyncpg.Pool, db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bus_module, "PROBE_EVERY", 0.1)
    await create_session(pool, tenant="t", session_id="s", agent="default", model="m")
    bus = EventBus(pool, db_dsn)
    await asyncio.wait_for(bus.start(), 10)
    first = bus._listener
    probe = asyncpg.Connection.fetchval

    async def fetchval(self: asyncpg.Connection, *args: Any, **kwargs: Any) -> Any:
        if self is first:
            raise asyncpg.exceptions.ProtocolError("an unexpected message")
        return await probe(self, *args, **kwargs)

    monkeypatch.setattr(asyncpg.Connection, "fetchval", fetchval)
    try:
        async with bus.subscribe("t", "s") as queue:
            for _ in range(100):  # the failed probe, then the next listener
                if bus._listener is not first:
                    break
                await asyncio.sleep(0.05)
            assert bus._listener is not first and bus._listener is not None
            while bus._listener.is_closed():
                await asyncio.sleep(0.05)
            await bus.publish(pool, tenant="t", session_id="s", name=USAGE, data={})
            await asyncio.wait_for(queue.get(), 5)
            await asyncio.sleep(0.3)  # a second delivery would be here by now
            assert queue.empty(), "the event came twice: two connections listened"
            assert first is not None and first.is_closed()
    finally:
        await asyncio.wait_for(bus.stop(), 5)
