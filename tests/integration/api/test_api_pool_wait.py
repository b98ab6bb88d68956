"""The session and memory APIs wait for a pooled connection as a chat does: at most
``CASCADE_POOL_TIMEOUT_SECONDS``, then the 503 ``server_busy`` with ``Retry-After`` the
SDKs retry, rather than queueing until a connection comes free (``db.BoundedPool``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg
import httpx

from tests.integration.api.conftest import StartProxy

AUTH = {"Authorization": "Bearer sk-test-client"}


async def _waiting_on_a_lock(admin: asyncpg.Connection) -> None:
    deadline = time.monotonic() + 5
    sql = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
    )
    while not await admin.fetchval(sql):
        assert time.monotonic() < deadline, "the first read never waited on the lock"
        await asyncio.sleep(0.02)


def test_a_read_that_finds_every_connection_held_is_a_503_with_retry_after(
    db_dsn: str, start_proxy: StartProxy, config_path: Path
) -> None:
    """The one connection is held by a session list stuck behind a table lock: a second
    session list and a memory list each wait the pool's bound, then are told to retry;
    once the lock goes the first is answered and nothing leaked."""
    server = start_proxy(config_path, pool_max_size=1, pool_timeout_seconds=0.3)

    async def run() -> tuple[list[httpx.Response], list[float], int, int]:
        admin = await asyncpg.connect(db_dsn)
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as http:
            try:
                tx = admin.transaction()
                await tx.start()
                await admin.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
                holder = asyncio.create_task(http.get("/sessions"))
                await _waiting_on_a_lock(admin)
                busy, waited = [], []
                for path in ("/sessions", "/memory"):
                    started = time.monotonic()
                    busy.append(await http.get(path))
                    waited.append(time.monotonic() - started)
                await tx.rollback()
            finally:
                await admin.close()
            first = (await holder).status_code
            return busy, waited, first, (await http.get("/memory")).status_code

    busy, waited, first, later = asyncio.run(run())
    for answer in busy:
        assert answer.status_code == 503, answer.text
        assert answer.headers["retry-after"] == "1"
        error = answer.json()["error"]
        assert error["code"] == "server_busy" and "CASCADE_POOL_MAX_SIZE" in error["message"]
    # waited the bound (0.3 s), then gave up: 5x under the default bound (10 s) one that
    # ignored the setting waits, and a queue waits for the lock (the client's 30 s)
    assert all(0.25 <= w < 2.0 for w in waited), waited
    assert first == 200 and later == 200  # the connection came back: nothing leaked
