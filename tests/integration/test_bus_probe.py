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
from proxy.bus import RELISTENED, EventBus
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
    probe = asyncpg.Connection.execute

    async def execute(self: asyncpg.Connection, *args: Any, **kwargs: Any) -> Any:
        if self is first:
            raise asyncpg.exceptions.ProtocolError("an unexpected message")
        return await probe(self, *args, **kwargs)

    add_listener = asyncpg.Connection.add_listener

    async def slow_listen(self: asyncpg.Connection, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.2)  # the next listener is open a while before it listens
        return await add_listener(self, *args, **kwargs)

    monkeypatch.setattr(asyncpg.Connection, "execute", execute)
    monkeypatch.setattr(asyncpg.Connection, "add_listener", slow_listen)
    try:
        async with bus.subscribe("t", "s") as queue:
            for _ in range(100):  # the failed probe, then the next listener, listening
                if bus._listener is not first and not bus._retrying:
                    break
                await asyncio.sleep(0.05)
            assert bus._listener is not first and bus._listener is not None
            assert not bus._retrying, "the next listener's LISTEN did not answer"
            assert queue.get_nowait() is RELISTENED  # the stream's end: it missed the gap
            await bus.publish(pool, tenant="t", session_id="s", name=USAGE, data={})
            assert (await asyncio.wait_for(queue.get(), 5)).name == USAGE
            await asyncio.sleep(0.3)  # a second delivery would be here by now
            assert queue.empty(), "the event came twice: two connections listened"
            assert first is not None and first.is_closed()
    finally:
        await asyncio.wait_for(bus.stop(), 5)


async def test_a_probed_listener_still_reads_as_listening(
    pool: asyncpg.Pool, db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pg_stat_activity`` shows a connection's last statement: the bench's samplers
    (``bench/capacity.py``) and the warm-up's tests tell the listener from the pool's
    connections by its ``LISTEN``, which a ``SELECT 1`` probe replaced after its first round."""
    monkeypatch.setattr(bus_module, "PROBE_EVERY", 0.1)
    bus = EventBus(pool, db_dsn)
    await asyncio.wait_for(bus.start(), 10)
    try:
        await asyncio.sleep(0.5)  # some probes
        assert bus._listener is not None and not bus._listener.is_closed()
        listening = await pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
        )
        assert listening == 1
    finally:
        await asyncio.wait_for(bus.stop(), 5)
