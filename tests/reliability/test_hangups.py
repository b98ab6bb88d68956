"""Clients that hang up mid-stream, 200 times: every upstream request is cancelled, nothing
grows (asyncio tasks, file descriptors, database connections) and each session goes on."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.conftest import column
from tests.reliability.conftest import Figures, ProxyServer

# Loads both cores or times the proxy: make test runs it alone, after the rest.
pytestmark = pytest.mark.heavy

HANGUPS = 200
SESSIONS = 10
CONNECTIONS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND pid <> pg_backend_pid()"
)


class CountedProxy(ProxyServer):
    """The in-thread proxy, with a way to count the tasks on its event loop."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.loop: asyncio.AbstractEventLoop | None = None
        serve = self._server.serve

        async def serve_and_remember(*args: Any, **kwargs: Any) -> None:
            self.loop = asyncio.get_running_loop()
            await serve(*args, **kwargs)

        self._server.serve = serve_and_remember  # type: ignore[method-assign]

    def tasks(self) -> int:
        async def count() -> int:
            return len(asyncio.all_tasks()) - 1  # not this one

        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(count(), self.loop).result(5)


@pytest.fixture
def counted(settings: Settings) -> Iterator[CountedProxy]:
    server = CountedProxy(settings)
    server.start()
    yield server
    server.stop()


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _hang_up(origin: str, sid: str, i: int) -> None:
    body = {
        "model": "gpt-4o",
        "stream": True,
        "messages": [{"role": "user", "content": f"question {i}"}],
    }
    with (
        httpx.Client(
            base_url=origin,
            timeout=10,
            headers={"authorization": "Bearer sk-test-client", "x-session-id": sid},
        ) as http,
        http.stream("POST", "/v1/chat/completions", json=body) as r,
    ):
        assert r.status_code == 200
        for line in r.iter_lines():
            if '"content"' in line:
                return  # the answer is flowing: hang up


def _settle(fake: FakeUpstream, requests: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while fake.open_responses or len(fake.disconnects) < requests:
        assert time.monotonic() < deadline, (fake.open_responses, len(fake.disconnects))
        time.sleep(0.02)


def test_two_hundred_hang_ups_cancel_upstream_and_leak_nothing(
    counted: CountedProxy, fake_upstream: FakeUpstream, db_dsn: str, figures: Figures
) -> None:
    """Client hang-ups mid-stream: upstream cancelled, no growth in tasks, fds, connections."""
    proxy = counted
    # Every answer stops after its first frame until its client hung up (its Pacer never
    # lets the rest go): the hang-up always lands while the provider is still sending.
    fake_upstream.default = lambda _: reply("word " * 200, chunks=100, pacer=Pacer())
    sids = [f"hang-{k}" for k in range(SESSIONS)]

    def run(n: int, offset: int) -> None:
        with ThreadPoolExecutor(SESSIONS) as pool:
            list(
                pool.map(
                    lambda k: [
                        _hang_up(proxy.origin, sids[k], offset + k * n + i) for i in range(n)
                    ],
                    range(SESSIONS),
                )
            )

    run(2, 0)  # warm-up: pools filled, lazy state made
    _settle(fake_upstream, 2 * SESSIONS)
    tasks0, fds0 = proxy.tasks(), _fds()
    conns0 = column(db_dsn, CONNECTIONS)[0]
    t0 = time.monotonic()
    run(HANGUPS // SESSIONS, 1000)
    _settle(fake_upstream, HANGUPS + 2 * SESSIONS)
    elapsed = time.monotonic() - t0
    # What a hang-up leaves to finish (a cancellation's unwinding) ends soon, on a slow
    # machine later; a leak never does: read until within the bounds below, for up to 10 s.
    deadline = time.monotonic() + 10
    while True:
        tasks1, fds1 = proxy.tasks(), _fds()
        conns1 = column(db_dsn, CONNECTIONS)[0]
        settled = tasks1 <= tasks0 + 3 and fds1 <= fds0 + 5 and conns1 <= conns0 + SESSIONS
        if settled or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    total = HANGUPS + 2 * SESSIONS
    cancelled = len(fake_upstream.disconnects)
    figures.add(
        tried=HANGUPS,
        upstream_cancelled=cancelled - 2 * SESSIONS,
        tasks_before=tasks0,
        tasks_after=tasks1,
        fds_before=fds0,
        fds_after=fds1,
        db_conns_before=conns0,
        db_conns_after=conns1,
        seconds=elapsed,
    )
    assert len(fake_upstream.bodies()) == cancelled == total  # every one cancelled upstream
    assert fake_upstream.open_responses == 0
    assert tasks0 > 0 and tasks1 <= tasks0 + 3, (tasks0, tasks1)
    assert fds1 <= fds0 + 5, (fds0, fds1)
    # A request borrows a pooled connection per statement (the lease holds the session), so
    # the pool may still grow lazily up to one per concurrent session; a connection lost per
    # hang-up would be 200.
    assert conns1 <= conns0 + SESSIONS, (conns0, conns1)
    # every session is still usable, and stored no reply of a hung-up stream
    fake_upstream.default = reply("done")
    with httpx.Client(
        base_url=proxy.origin, timeout=10, headers={"authorization": "Bearer sk-test-client"}
    ) as http:
        for sid in sids:
            r = http.post(
                "/v1/chat/completions",
                headers={"x-session-id": sid},
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": "still there?"}]},
            )
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "done"
    deadline = time.monotonic() + 5
    while (
        len(
            rows := column(
                db_dsn, "SELECT message->>'content' FROM messages WHERE role = 'assistant'"
            )
        )
        < SESSIONS
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert rows == ["done"] * SESSIONS
