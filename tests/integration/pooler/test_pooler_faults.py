"""PgBouncer paused (``PAUSE`` on its console) or restarted under a replica: a request meets a
bounded 503 ``database_unavailable`` with ``Retry-After`` rather than hanging for the whole
pause, a stream mid-answer still reaches its client whole, a reply whose storing met the
fault is said in a WARNING (its client's next request stores it, as Durability says), and
nothing is stored twice. Each test has a PgBouncer of its own, so that pausing or
restarting it leaves the other tests' alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from proxy.session_id import tenant_from_bearer
from proxy.settings import Settings
from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, Records
from tests.integration.api.sse_frames import DONE, _data_frames
from tests.integration.api.test_database_loss import assert_unavailable, post, stored_soon
from tests.integration.pooler.conftest import own_pgbouncer
from tests.integration.pooler.pgbouncer import PgBouncer

BOUND = 1.0  # the proxy's statement timeout here
PATIENCE = 20.0  # what must happen, however slowly a loaded machine gets there
ANSWER = "one two three four"
TTL = 1.0  # the lease's time to live where a test waits it out


@pytest.fixture
def bouncer(db_dsn: str) -> Iterator[PgBouncer]:
    with own_pgbouncer(db_dsn, pool_size=4) as own:
        yield own


def _settings(bouncer: PgBouncer, db_dsn: str, config_path: Path, **more: Any) -> Settings:
    """A replica's behind ``bouncer`` as README deploys one (the LISTEN straight to
    PostgreSQL), its statements bound to ``BOUND``."""
    return Settings(
        database_url=bouncer.pooled(db_dsn),
        db_pooler="transaction",
        database_listen_url=db_dsn,
        config=config_path,
        keepalive_seconds=0.3,
        watch_config=False,
        db_statement_timeout_seconds=BOUND,
        **more,
    )


@pytest.fixture
def pooled(bouncer: PgBouncer, db_dsn: str, config_path: Path) -> Iterator[ProxyServer]:
    """A replica behind ``bouncer`` as README deploys one (the LISTEN straight to PostgreSQL)."""
    server = ProxyServer(_settings(bouncer, db_dsn, config_path)).start()
    yield server
    server.stop()


def until_served(proxy: ProxyServer, sid: str, *texts: str) -> httpx.Response:
    """The request, sent again after each documented 503 until it is served."""
    deadline = time.monotonic() + PATIENCE
    while (r := post(proxy, sid, *texts)).status_code != 200:
        assert_unavailable(r)
        assert time.monotonic() < deadline, "not served after the fault"
        time.sleep(0.2)
    return r


def said(records: Records, opening: str) -> list[str]:
    return [m for rec in records.records if (m := rec.getMessage()).startswith(opening)]


async def live(admin: asyncpg.Connection, sid: str) -> list[tuple[str, str]]:
    rows = await admin.fetch(
        "SELECT role, message->>'content' AS text FROM messages"
        " WHERE session_id = $1 AND superseded_at IS NULL ORDER BY pos",
        sid,
    )
    return [(r["role"], r["text"]) for r in rows]


async def test_a_request_during_a_pause_is_a_bounded_503(
    pooled: ProxyServer, bouncer: PgBouncer, admin: asyncpg.Connection
) -> None:
    """Its statement queued in the paused PgBouncer is cancelled after the bound: before it,
    the request waited for as long as the pause lasted."""
    assert post(pooled, "s1").status_code == 200
    await bouncer.console("PAUSE")
    try:
        started = time.monotonic()
        r = await asyncio.to_thread(post, pooled, "s1", "hi", "again")
        took = time.monotonic() - started
    finally:
        await bouncer.console("RESUME")
    assert_unavailable(r)
    assert took < BOUND + 5, took
    await asyncio.to_thread(until_served, pooled, "s1", "hi", "again")
    assert await stored_soon(admin, "s1", 4) == 4
    assert [text for _, text in await live(admin, "s1")] == ["hi", "ok", "again", "ok"]


@pytest.mark.parametrize("fault", ["pause", "restart"])
async def test_a_stream_mid_answer_through_a_fault_reaches_its_client(
    pooled: ProxyServer,
    bouncer: PgBouncer,
    admin: asyncpg.Connection,
    fake_upstream: FakeUpstream,
    records: Records,
    fault: str,
) -> None:
    """The fault lasts past the stream's end: the client gets the whole answer, the reply
    that could not be stored is a WARNING, and once PgBouncer is back the client's next
    request (resending that reply) is served at once and stores it, once."""
    assert post(pooled, "s1").status_code == 200
    assert await stored_soon(admin, "s1", 2) == 2
    pacer = Pacer(PATIENCE)
    fake_upstream.script(reply(ANSWER, chunks=4, pacer=pacer))
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(post, pooled, "s1", "hi", "again", stream=True)
        await asyncio.to_thread(fake_upstream.wait_for_requests, 2, PATIENCE)
        if fault == "pause":
            await bouncer.console("PAUSE")
        else:
            await asyncio.to_thread(bouncer.stop)
        try:
            pacer.allow(10)
            r = await asyncio.wrap_future(future)
            deadline = time.monotonic() + PATIENCE  # said once its last statement gave up
            while not (unrecorded := said(records, "could not record the reply of session s1")):
                assert time.monotonic() < deadline, "the reply's loss was not said"
                await asyncio.sleep(0.05)
        finally:
            if fault == "pause":
                await bouncer.console("RESUME")
            else:
                await asyncio.to_thread(bouncer.restart)
    assert r.status_code == 200
    frames = _data_frames(r.content)
    assert frames[-1] == DONE, r.text
    assert ANSWER.split()[-1] in r.text
    assert len(unrecorded) == 1, unrecorded
    # the client resends the reply it got: stored with its next request, once
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": ANSWER},
        {"role": "user", "content": "third"},
    ]
    deadline = time.monotonic() + PATIENCE
    with httpx.Client(
        base_url=pooled.origin, timeout=PATIENCE, headers={"authorization": "Bearer sk-test-client"}
    ) as http:
        body = {"model": "gpt-4o", "messages": history}
        while (again := http.post("/s/s1/v1/chat/completions", json=body)).status_code != 200:
            assert_unavailable(again)  # a connection the restart cut, met before it was read
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
    assert await stored_soon(admin, "s1", 6) == 6
    assert [text for _, text in await live(admin, "s1")] == [
        "hi",
        "ok",
        "again",
        ANSWER,
        "third",
        "ok",
    ]


async def test_a_lease_left_held_by_a_restart_frees_within_its_time_to_live(
    bouncer: PgBouncer,
    db_dsn: str,
    config_path: Path,
    admin: asyncpg.Connection,
    fake_upstream: FakeUpstream,
) -> None:
    """Replica A's stream ends while PgBouncer is down, so its last statement, which frees
    the session's lease, fails; replica B's request for the session, sent as PgBouncer is
    back (and retried after a documented 503), takes it once the lease expires: A stopped
    renewing it when its request ended, so within the time to live and a poll."""
    settings = _settings(bouncer, db_dsn, config_path, lease_ttl_seconds=TTL)
    a, b = ProxyServer(settings).start(), ProxyServer(settings).start()
    try:
        assert post(a, "s1").status_code == 200
        pacer = Pacer(PATIENCE)
        fake_upstream.script(reply(ANSWER, chunks=4, pacer=pacer))
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(post, a, "s1", "hi", "again", stream=True)
            await asyncio.to_thread(fake_upstream.wait_for_requests, 2, PATIENCE)
            await asyncio.to_thread(bouncer.stop)
            pacer.allow(10)
            assert (await asyncio.wrap_future(future)).status_code == 200
        await asyncio.to_thread(bouncer.restart)
        back = time.monotonic()
        await asyncio.to_thread(until_served, b, "s1", "hi", "again", "third")
        took = time.monotonic() - back
    finally:
        a.stop()
        b.stop()
    assert took < TTL + 0.5 + 5, took  # the bound, and a loaded machine's slack


async def test_a_request_queued_behind_a_stream_through_a_restart_is_served_at_once(
    pooled: ProxyServer, bouncer: PgBouncer, admin: asyncpg.Connection, fake_upstream: FakeUpstream
) -> None:
    """A request waiting on its replica for the session a stream holds, PgBouncer restarted
    under the stream: the stream's last statement could not free the lease, and the queued
    request, this replica's, takes it back at once once PgBouncer is back (a 503 meanwhile,
    retried), not after the lease's 15 s time to live."""
    assert post(pooled, "s1").status_code == 200
    pacer = Pacer(PATIENCE)
    fake_upstream.script(reply(ANSWER, chunks=4, pacer=pacer))
    tenant = tenant_from_bearer("Bearer sk-test-client")
    with ThreadPoolExecutor(2) as pool:
        streaming = pool.submit(post, pooled, "s1", "hi", "again", stream=True)
        await asyncio.to_thread(fake_upstream.wait_for_requests, 2, PATIENCE)
        queued = pool.submit(post, pooled, "s1", "hi", "queued")
        deadline = time.monotonic() + PATIENCE
        while pooled.queued(tenant, "s1") < 2:
            assert time.monotonic() < deadline, "the second request never queued"
            await asyncio.sleep(0.02)
        await asyncio.to_thread(bouncer.stop)
        pacer.allow(10)
        assert (await asyncio.wrap_future(streaming)).status_code == 200
        first = await asyncio.wrap_future(queued)
        await asyncio.to_thread(bouncer.restart)
        back = time.monotonic()
    if first.status_code != 200:
        assert_unavailable(first)
        await asyncio.to_thread(until_served, pooled, "s1", "hi", "queued")
    assert time.monotonic() - back < 5, "the replica's own lease was not taken back at once"
