"""A session row another transaction holds (an operator's ``SELECT … FOR UPDATE`` left open,
a report's lock) stalls the renewal of that session's lease only, not of every lease the
replica holds: the renewal skips a row it would wait for, so a stream on another session
keeps its lease past the time to live (a waiter on another replica does not take it) and
its stream ends with its reply stored.

Before, the one statement that renews every lease waited for the held row, holding the
rows it had renewed before it: every lease on the replica lapsed, and a stream whose row
it held waited at its end for the operator's transaction.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg

from tests.fakes.replies import Pacer, RecordedRequest, Reply, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import Records, StartProxy
from tests.integration.api.test_database_loss import post, stored_soon

TTL = 0.9  # the lease's time to live here: renewed every 0.3 s
PATIENCE = 20.0
LIVE = "SELECT lease_expires > clock_timestamp() FROM sessions WHERE id = $1"


async def test_a_held_session_row_stalls_no_other_sessions_lease(
    start_proxy: StartProxy,
    config_path: Path,
    admin: asyncpg.Connection,
    fake_upstream: FakeUpstream,
    records: Records,
) -> None:
    proxy = start_proxy(config_path, lease_ttl_seconds=TTL)
    for sid in ("held", "free"):
        assert post(proxy, sid).status_code == 200
        assert await stored_soon(admin, sid, 2) == 2
    pacers: dict[str, Pacer] = {}

    def answer(req: RecordedRequest) -> Reply:
        sid = req.json["messages"][-1]["content"]
        return reply(f"answer of {sid}", pacer=pacers.setdefault(sid, Pacer(PATIENCE)))

    fake_upstream.default = answer
    with ThreadPoolExecutor(2) as pool:
        futures = {
            sid: pool.submit(post, proxy, sid, "hi", sid, stream=True) for sid in ("held", "free")
        }
        await asyncio.to_thread(fake_upstream.wait_for_requests, 4, PATIENCE)
        try:
            async with admin.transaction():  # held over three times the time to live
                await admin.execute("SELECT 1 FROM sessions WHERE id = 'held' FOR UPDATE")
                await asyncio.sleep(3 * TTL)
                assert await admin.fetchval(LIVE, "free"), "its lease lapsed under the stream"
                pacers["free"].allow(100)
                assert (await asyncio.wrap_future(futures["free"])).status_code == 200
                assert await stored_soon(admin, "free", 4) == 4  # stored under its lease
        finally:
            for pacer in pacers.values():
                pacer.allow(100)
        await asyncio.wrap_future(futures["held"])
    expired = [
        m
        for r in records.records
        if "expired under its request" in (m := r.getMessage()) and "session free" in m
    ]
    assert not expired, expired
    deadline = time.monotonic() + PATIENCE
    while await admin.fetchval("SELECT count(*) FROM sessions WHERE lease_owner IS NOT NULL"):
        assert time.monotonic() < deadline, "a lease stayed held"
        await asyncio.sleep(0.05)
