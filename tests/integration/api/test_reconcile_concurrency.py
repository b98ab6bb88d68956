"""History reconciliation by hash chain (DESIGN §4), end to end: concurrent requests.

Requests on one session are serialised, different sessions run in parallel, and replicas
taking turns on one session keep one history.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from proxy.settings import Settings
from tests.fakes.replies import Pacer, RecordedRequest, Reply, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.reconcile_helpers import (
    MODEL,
    all_messages,
    post,
    session_view,
    settled,
    user,
)

DELAY = 0.6


class Arrivals:
    """A responder that notes when each upstream call arrived, then answers after DELAY, or
    once ``held`` allows it."""

    def __init__(self, held: Pacer | None = None) -> None:
        self.times: list[float] = []
        self.held = held

    def __call__(self, request: RecordedRequest) -> Reply:
        self.times.append(time.monotonic())
        if self.held is not None:
            return reply("slow answer", pacer=self.held)
        return reply("slow answer", first_byte_delay=DELAY)


def _run_parallel(proxy_url: str, sids: list[str]) -> list[float]:
    """Send one chat request per session id at the same moment; return completion times."""
    done: list[float] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(sids))

    def one(i: int, sid: str) -> None:
        try:
            with httpx.Client(headers={"authorization": "Bearer sk-test-client"}, timeout=10) as c:
                start.wait()
                body = {"model": MODEL, "messages": [user(f"request {i}")]}
                resp = c.post(
                    f"{proxy_url}/chat/completions", json=body, headers={"x-session-id": sid}
                )
                assert resp.status_code == 200, resp.text
                done.append(time.monotonic())
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i, s)) for i, s in enumerate(sids)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not errors, errors
    return sorted(done)


def test_one_session_is_serialised_different_sessions_overlap(
    proxy: Any, fake_upstream: FakeUpstream
) -> None:
    same = Arrivals()
    fake_upstream.script(same, same)
    t0 = time.monotonic()
    done = _run_parallel(proxy.url, ["same", "same"])
    first, second = sorted(same.times)
    # the second upstream call starts only after the first answered
    assert second - first >= DELAY - 0.01
    assert done[1] - t0 >= 2 * DELAY - 0.01

    # Both answers are held: the second upstream call starts while the first still waits.
    held = Pacer(first=True)
    apart = Arrivals(held)
    fake_upstream.script(apart, apart)
    with ThreadPoolExecutor(1) as pool:
        ran = pool.submit(_run_parallel, proxy.url, ["left", "right"])
        deadline = time.monotonic() + 8
        while len(apart.times) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        both_waiting = len(apart.times) == 2
        held.allow(10)
        ran.result(15)
    assert both_waiting and not held.expired


def test_replicas_taking_turns_keep_one_history(
    proxy: ProxyServer, settings: Settings, http: httpx.Client
) -> None:
    """Each replica guesses the stored head it last left; when the other replica moved it,
    the guess is wrong, nothing is written by the first statement, and the request appends
    in a second one. Whatever the order, the store holds exactly the conversation."""
    other = ProxyServer(settings.model_copy(update={"watch_config": False})).start()
    auth = {"authorization": "Bearer sk-test-client"}
    history: list[Any] = [user("q0")]
    try:
        for turn, server in enumerate((proxy, proxy, other, other, proxy, other)):
            with httpx.Client(base_url=server.origin, headers=auth, timeout=10) as c:
                answer = post(c, "turns", history)["choices"][0]["message"]
            settled(http, "turns", len(history) + 1)  # the reply is stored after the answer
            history = [*history, answer, user(f"q{turn + 1}")]
    finally:
        other.stop()
    stored = all_messages(http, "turns")
    assert [r["message"]["content"] for r in stored] == [m["content"] for m in history[:-1]]
    assert session_view(http, "turns")["superseded_count"] == 0
