"""A database that does not answer: a statement waiting on a lock a long transaction holds
(``pg_sleep`` inside it) is cancelled after ``CASCADE_DB_STATEMENT_TIMEOUT_SECONDS`` and its
request answered the documented 503 ``database_unavailable`` with ``Retry-After`` (an error
frame once a stream's 200 went out), rather than a request that hangs for as long as the
lock is held; a ``statement_timeout`` the database sets is the same 503, not a 500. The
session is free again at once: the next request is served.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.integration.api.conftest import ProxyServer, StartProxy
from tests.integration.api.sse_frames import DONE, _data_frames, _payload
from tests.integration.api.test_database_loss import assert_unavailable, post, stored_soon

BOUND = 1.0  # the proxy's statement timeout in these tests
PATIENCE = 20.0  # what must happen, however slowly a loaded machine gets there
AGAIN = ("hi", "again")


@pytest.fixture
def slow_proxy(start_proxy: StartProxy, config_path: Path) -> ProxyServer:
    return start_proxy(config_path, db_statement_timeout_seconds=BOUND)


@contextlib.asynccontextmanager
async def locked(admin: asyncpg.Connection, session_id: str) -> AsyncIterator[None]:
    """Hold the session's row in a transaction until the block ends."""
    async with admin.transaction():
        await admin.execute("SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE", session_id)
        yield


def assert_unavailable_frame(r: httpx.Response) -> None:
    """A stream's 200 that ends with the 503's error frame (its keep-alives had begun)."""
    assert r.status_code == 200, r.text
    payloads = [_payload(f) for f in _data_frames(r.content) if f != DONE]
    error = payloads[-1]["error"]
    assert error["code"] == "database_unavailable", error
    assert int(error["retry_after"]) > 0


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
async def test_a_statement_waiting_on_a_held_lock_is_a_bounded_503(
    slow_proxy: ProxyServer, admin: asyncpg.Connection, stream: bool
) -> None:
    assert post(slow_proxy, "s1", stream=stream).status_code == 200
    assert await stored_soon(admin, "s1", 2) == 2  # its lease freed with its reply stored
    with ThreadPoolExecutor(1) as pool:
        async with locked(admin, "s1"):
            started = time.monotonic()
            future = pool.submit(post, slow_proxy, "s1", *AGAIN, stream=stream)
            while not future.done():  # the lock stays held until the answer came
                assert time.monotonic() - started < PATIENCE, "the request hung on the lock"
                await asyncio.sleep(0.02)
            took = time.monotonic() - started
        r = future.result()
    (assert_unavailable_frame if stream else assert_unavailable)(r)
    assert took < BOUND + 5, took
    assert post(slow_proxy, "s1", *AGAIN, stream=stream).status_code == 200
    assert await stored_soon(admin, "s1", 4) == 4  # nothing of the refused try doubled


async def test_a_statement_timeout_of_the_database_is_a_503(
    proxy: ProxyServer, admin: asyncpg.Connection
) -> None:
    """A ``statement_timeout`` an operator set on the database cancels the request's statement
    waiting on the lock: asyncpg's QueryCanceledError, which was answered with a 500."""
    assert post(proxy, "s1").status_code == 200
    assert await stored_soon(admin, "s1", 2) == 2
    await admin.execute(
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET statement_timeout = 200', "
        "current_database()); END $$"
    )
    # the pool's connections read the setting as they open: end those open now
    await admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    deadline = time.monotonic() + PATIENCE
    while post(proxy, "warm").status_code != 200:  # a killed connection met is a 503 too
        assert time.monotonic() < deadline
    async with locked(admin, "s1"):
        await admin.execute("SET LOCAL statement_timeout = 0")
        r = await asyncio.to_thread(post, proxy, "s1", *AGAIN)
    assert_unavailable(r)
    assert "did not answer in time" in r.json()["error"]["message"]
