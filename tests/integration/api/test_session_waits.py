"""Time spent waiting for a session is shown apart from the proxy's own time.

A request that waits for its session (behind this replica's earlier request on it, or for a
lease another replica holds) used to show the wait only inside ``X-Cascade-Overhead-Ms`` and
``cascade_overhead_seconds``: with three replicas looping on one session an operator read
1.5 s of "overhead" per request and nothing said it was the session. The access line now
carries ``session_wait_ms`` and ``/metrics`` a ``cascade_session_wait_seconds`` histogram.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.session_id import tenant_from_bearer
from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import (
    ProxyServer,
    Records,
    StartProxy,
    wait_for,
    write_config,
)
from tests.integration.api.test_metrics import scrape
from tests.integration.conftest import column

AUTH = {"authorization": "Bearer sk-test-client"}
TENANT = tenant_from_bearer(AUTH["authorization"])
HOLD = 1.0  # how long the first request holds the session once the second one waits
LEAST = HOLD / 4  # of which the wait measured holds at least this much: a lease's wait is
# its pauses between tries, and a loaded machine's tries take some of the time
WAIT = "cascade_session_wait_seconds"


def chat(origin: str, sid: str, text: str, *, stream: bool = False) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}], "stream": stream}
    headers = AUTH | {"x-session-id": sid}
    return httpx.post(f"{origin}/v1/chat/completions", json=body, headers=headers, timeout=20)


def behind_a_slow_request(
    first: str, second: Any, sid: str, fake: FakeUpstream, waiting: Callable[[], bool]
) -> tuple[str, httpx.Response]:
    """Send a streamed request to ``first`` whose answer the provider holds back; once it
    runs, call ``second()``, and once ``waiting()`` says that one waits for the session, let
    the answer end ``HOLD`` seconds later. Returns the slow request's id and what
    ``second`` answered."""
    pacer = Pacer()
    fake.script(reply("slow", chunks=2, pacer=pacer))
    out: dict[str, httpx.Response] = {}
    asked = len(fake.requests)

    def run(name: str, call: Callable[[], httpx.Response]) -> threading.Thread:
        thread = threading.Thread(target=lambda: out.setdefault(name, call()))
        thread.start()
        return thread

    slow = run("slow", lambda: chat(first, sid, "slow", stream=True))
    fake.wait_for_requests(asked + 1, 20)  # at the provider: the slow request holds the session
    waiter = run("second", second)
    try:
        assert wait_for(waiting, timeout=10), "the second request never waited"
        time.sleep(HOLD)
    finally:
        pacer.allow(10)
        slow.join(20)
        waiter.join(20)
    assert not pacer.expired
    assert out["slow"].status_code == 200, out["slow"].text
    return out["slow"].headers["x-request-id"], out["second"]


def access_line(records: Records, request_id: str) -> dict[str, Any]:
    """The access line of ``request_id`` (written just after its response is sent)."""
    deadline = time.monotonic() + 5
    while True:
        lines = [r.fields for r in records.records if r.name == "cascade.access"]  # type: ignore[attr-defined]
        found = [line for line in lines if line["request_id"] == request_id]
        if found or time.monotonic() > deadline:
            assert found, lines
            return dict(found[0])
        time.sleep(0.01)


def test_a_request_behind_another_on_its_replica_logs_and_measures_its_wait(
    proxy: ProxyServer, fake_upstream: FakeUpstream, records: Records
) -> None:
    slow_id, waited = behind_a_slow_request(
        proxy.origin,
        lambda: chat(proxy.origin, "waits", "next"),
        "waits",
        fake_upstream,
        lambda: proxy.queued(TENANT, "waits") == 2,
    )
    assert waited.status_code == 200, waited.text
    first = access_line(records, slow_id)
    second = access_line(records, waited.headers["x-request-id"])
    assert first.get("session_wait_ms", 0) < 100  # none, or a few ms
    assert second["session_wait_ms"] >= LEAST * 1000
    samples = scrape(proxy.origin)
    assert samples.value(f"{WAIT}_count") == 2
    assert samples.value(f"{WAIT}_sum") >= LEAST
    health = httpx.get(f"{proxy.origin}/healthz")
    line = access_line(records, health.headers["x-request-id"])
    assert "session_wait_ms" not in line  # no session, no wait


@pytest.mark.parametrize("action", ["chat", "reset", "compact"])
def test_a_wait_for_another_replicas_lease_is_logged_and_measured(
    action: str,
    tmp_path: Path,
    fake_upstream: FakeUpstream,
    start_proxy: StartProxy,
    records: Records,
    db_dsn: str,
) -> None:
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    a, b = start_proxy(config), start_proxy(config)
    sid = f"lease-{action}"
    assert chat(a.origin, sid, "hello").status_code == 200  # the session exists

    def queued_on_the_lease() -> bool:  # b found the lease held (migration 0022)
        return any(column(db_dsn, "SELECT lease_queue FROM sessions WHERE id = $1", sid))

    def on_b() -> httpx.Response:
        if action == "chat":
            return chat(b.origin, sid, "from b")
        return httpx.post(f"{b.origin}/v1/sessions/{sid}/{action}", headers=AUTH, timeout=20)

    _, waited = behind_a_slow_request(a.origin, on_b, sid, fake_upstream, queued_on_the_lease)
    assert waited.status_code == 200, waited.text
    line = access_line(records, waited.headers["x-request-id"])
    assert line["session_wait_ms"] >= LEAST * 1000
    assert scrape(b.origin).value(f"{WAIT}_sum") >= LEAST
