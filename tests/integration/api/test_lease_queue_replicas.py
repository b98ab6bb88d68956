"""A waiter on another replica is not starved by a busy agent (migration 0022).

Replica A serves an agent that sends its next request the moment the last one is answered;
replica B gets a reset, a branch or a chat request on the same session. Without the queue
of waiters on the session row, B's polls had to land in the few milliseconds between two of
A's steps and B waited seconds to minutes; with it, B is next once A's step in flight ends.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import httpx
import pytest

from proxy.store.leases import POLL_MAX_SECONDS
from tests.fakes.replies import RecordedRequest, Reply, reply
from tests.fakes.upstream import FakeUpstream

AUTH = {"authorization": "Bearer sk-test-client"}
SID = "busy"
TRIES = 10
# What B may wait: A's step in flight (an answer of at most 0.1 s, and its statements), one
# pause between B's tries, and room for a loaded test machine. Without the queue, a try
# now and then waited several seconds here (docs/perf.md, "a waiter on another replica").
BOUND = 0.1 + POLL_MAX_SECONDS + 1.0


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


class BusyAgent(threading.Thread):
    """An agent on one replica: each request sent as soon as the last one is answered."""

    def __init__(self, origin: str) -> None:
        super().__init__(daemon=True)
        self.origin = origin
        self.steps: list[float] = []
        self.errors: list[BaseException] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        history: list[dict[str, Any]] = [user("start")]
        headers = AUTH | {"x-session-id": SID}
        try:
            with httpx.Client(base_url=self.origin, headers=headers, timeout=20) as c:
                while not self._stop_event.is_set():
                    body = {"model": "gpt-4o", "messages": history}
                    r = c.post("/v1/chat/completions", json=body)
                    assert r.status_code == 200, r.text
                    self.steps.append(time.monotonic())
                    answer = r.json()["choices"][0]["message"]
                    history = [*history, answer, user(f"u{len(self.steps)}")]
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.errors.append(exc)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(20)
        assert self.errors == []


@pytest.fixture(autouse=True)
def quick_answers(fake_upstream: FakeUpstream) -> None:
    """Every answer within 0.1 s, so that A's agent keeps the session busy."""

    rng = random.Random()  # the fake's own: the shared state is hypothesis's, in other tests

    def answer(req: RecordedRequest) -> Reply:
        return reply("ok", first_byte_delay=rng.uniform(0.05, 0.1))

    fake_upstream.default = answer


def act(c: httpx.Client, action: str, i: int) -> httpx.Response:
    if action == "reset":
        return c.post(f"/v1/sessions/{SID}/reset")
    if action == "branch":
        return c.post(f"/v1/sessions/{SID}/branch", json={"id": f"{SID}-copy-{i}"})
    body = {"model": "gpt-4o", "messages": [user(f"from replica B, {i}")]}
    return c.post("/v1/chat/completions", json=body, headers={"x-session-id": SID})


@pytest.mark.parametrize("action", ["reset", "branch", "chat"])
def test_a_waiter_on_another_replica_is_next_after_the_step_in_flight(
    action: str, replicas: list[str]
) -> None:
    a, b = replicas
    agent = BusyAgent(a)
    agent.start()
    waits: list[float] = []
    try:
        while len(agent.steps) < 3:  # the agent is under way
            time.sleep(0.01)
        with httpx.Client(base_url=b, headers=AUTH, timeout=60) as c:
            for i in range(TRIES):
                started = time.monotonic()
                r = act(c, action, i)
                assert r.status_code == 200, r.text
                waits.append(round(time.monotonic() - started, 3))
                assert waits[-1] < BOUND, f"replica B's {action} waited {waits} s"
                steps = len(agent.steps)
                while len(agent.steps) == steps:  # the agent takes the session back
                    time.sleep(0.01)
                    assert time.monotonic() - started < 10, "the agent never got back in"
    finally:
        agent.stop()
