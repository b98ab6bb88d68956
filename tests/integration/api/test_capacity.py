"""Requests in flight against the connection pool (DESIGN §4: different sessions never wait
on each other).

A chat request holds one pooled connection from its first statement until its reply is
stored, because the session's advisory lock lives on it. So the pool bounds how many chat
requests one replica serves at once: the default must leave room for many agents waiting on
slow models, and past it a request gets a 503 that says so, not an endless queue.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import openai
import pytest

from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream, reply
from tests.integration.api.conftest import ProxyServer

CLIENT_KEY = "sk-test-client"
HI = [{"role": "user", "content": "hi"}]


def _client(server: ProxyServer, session: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=server.url,
        api_key=CLIENT_KEY,
        max_retries=0,
        timeout=20,
        default_headers={"X-Session-Id": session},
    )


async def _ask(server: ProxyServer, session: str) -> str:
    async with _client(server, session) as client:
        answer = await client.chat.completions.create(model="gpt-fake", messages=HI)
    return answer.choices[0].message.content or ""


def test_more_sessions_than_ten_reach_a_slow_provider_at_once_by_default(
    db_dsn: str, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    # The pool used to hold 10: the 11th session waited for a whole answer of another one.
    n = 16
    fake_upstream.script(*(reply(f"late {i}", first_byte_delay=3.0) for i in range(n)))
    server = ProxyServer(
        Settings(database_url=db_dsn, config=config_path, watch_config=False)
    ).start()
    try:

        async def run() -> tuple[list[str], float]:
            started = time.monotonic()
            tasks = [asyncio.create_task(_ask(server, f"cap-{i}")) for i in range(n)]
            # every request reaches the provider while the first ones are still waiting on it
            await asyncio.to_thread(fake_upstream.wait_for_requests, n, 2.5)
            reached = time.monotonic() - started
            return await asyncio.gather(*tasks), reached

        answers, reached = asyncio.run(run())
    finally:
        server.stop()
    assert reached < 2.5
    assert sorted(answers) == sorted(f"late {i}" for i in range(n))


def test_a_request_that_finds_every_connection_held_is_a_503_with_retry_after(
    db_dsn: str, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("slow", first_byte_delay=2.0), reply("later"))
    settings = Settings(
        database_url=db_dsn,
        config=config_path,
        watch_config=False,
        pool_max_size=1,
        pool_timeout_seconds=0.3,
    )
    server = ProxyServer(settings).start()
    try:

        async def run() -> tuple[str, openai.APIStatusError, float, str]:
            holder = asyncio.create_task(_ask(server, "holder"))
            await asyncio.to_thread(fake_upstream.wait_for_requests, 1)
            started = time.monotonic()
            with pytest.raises(openai.APIStatusError) as busy:
                await _ask(server, "other")
            waited = time.monotonic() - started
            first = await holder
            return first, busy.value, waited, await _ask(server, "other")

        first, busy, waited, later = asyncio.run(run())
    finally:
        server.stop()
    assert first == "slow"
    assert busy.status_code == 503
    assert busy.response.headers["retry-after"] == "1"
    error = busy.response.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "server_busy"
    assert "CASCADE_POOL_MAX_SIZE" in error["message"]
    assert 0.25 <= waited < 1.5  # waited for a connection, then gave up; not for the answer
    assert later == "later"  # the connection came back: nothing leaked


def test_requests_queued_on_one_session_hold_no_connection_other_sessions_need(
    db_dsn: str, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    # Four requests at once on one session, two connections: the three behind the first
    # used to take the second connection to wait on the session's lock, so another
    # session found the pool empty.
    fake_upstream.script(
        reply("first", first_byte_delay=1.0),
        reply("other"),
        *(reply("queued", first_byte_delay=0.2) for _ in range(3)),
    )
    settings = Settings(
        database_url=db_dsn,
        config=config_path,
        watch_config=False,
        pool_max_size=2,
        pool_timeout_seconds=0.5,
    )
    server = ProxyServer(settings).start()
    try:

        async def run() -> tuple[list[str], str, float]:
            busy = [asyncio.create_task(_ask(server, "busy"))]
            await asyncio.to_thread(fake_upstream.wait_for_requests, 1)
            busy += [asyncio.create_task(_ask(server, "busy")) for _ in range(3)]
            await asyncio.sleep(0.2)  # the three are queued behind the first
            started = time.monotonic()
            other = await _ask(server, "other")
            waited = time.monotonic() - started
            return await asyncio.gather(*busy), other, waited

        busy, other, waited = asyncio.run(run())
    finally:
        server.stop()
    assert other == "other" and waited < 0.5  # a connection was free at once
    assert sorted(busy) == ["first", "queued", "queued", "queued"]  # one at a time, all served
