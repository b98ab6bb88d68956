"""A background compaction that meets its session's row locked by a short transaction (the
request that started it storing its reply, the next request taking the lease) takes its claim
once the lock goes. Its claim does not wait for the lock holding a connection
(``store.leases.claim_compaction``, ``skip_locked``): it tries again after a pause, where a
locked row once read as another replica's compaction and the summary was never written."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, Model, stack, wait_until

LOCK = "SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE"


def test_a_background_compaction_outlasts_a_short_lock_on_its_row(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model()
    with stack(tmp_path, db_dsn, fake_upstream, model) as s:
        summarizer = s.proxy.state("summarizer")
        run_background = summarizer._run_background
        locks: list[float] = []

        async def locked_first(job: Any) -> Any:
            conn = await asyncpg.connect(db_dsn)
            tx = conn.transaction()
            await tx.start()
            await conn.execute(LOCK, job.session_id)
            locks.append(asyncio.get_running_loop().time())

            async def unlock() -> None:
                await asyncio.sleep(0.3)
                await tx.rollback()
                await conn.close()

            unlocking = asyncio.create_task(unlock())
            try:
                return await run_background(job)
            finally:
                await unlocking

        summarizer._run_background = locked_first
        Agent(s.client("locked")).fill()
        wait_until(lambda: locks, what="the background compaction")
        wait_until(lambda: s.summaries("locked"), what="the summary, once the lock went")
    assert len(model.fast_times) == 1
