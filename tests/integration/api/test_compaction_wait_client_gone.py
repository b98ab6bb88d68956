"""A chat over the hard threshold waits for the compaction in flight (README, "Timing of
writes"); a streamed one sends keep-alives meanwhile. Its client leaving during that wait
ends it there, as it ends a wait for the session: the session is freed at once, and no
compaction of its own is run after the first for nobody (a fast-model call, billed), nor
the provider called. The ``/compact`` endpoint's client is held to the same
(test_compact_waits.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx

from proxy.session_id import tenant_from_bearer
from tests.fakes.replies import Pacer
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import (
    CLIENT_KEY,
    MAIN,
    Agent,
    Model,
    Stack,
    stack,
    wait_until,
    words,
)
from tests.integration.api.conftest import wait_for
from tests.integration.api.test_compact_waits import SUMMARIZE, _compact

TENANT = tenant_from_bearer(f"Bearer {CLIENT_KEY}")
SID = "leaves"
PATIENCE = 60.0  # of the held call: a session held until it runs out is 6x the 10 s waited


def _leave_at_the_first_keep_alive(s: Stack, body: dict[str, Any]) -> None:
    """The streamed chat ``body``, left by its client at its first frame, a keep-alive: it
    waits, its 200 sent."""
    headers = {"authorization": f"Bearer {CLIENT_KEY}", "x-session-id": SID}
    with (
        httpx.Client(base_url=s.proxy.origin, headers=headers, timeout=10) as c,
        c.stream("POST", "/v1/chat/completions", json=body) as resp,
    ):
        assert next(resp.iter_raw()).startswith(b": keep-alive")  # waiting, its 200 sent


def _freed_then_first_answered(
    s: Stack, held: Pacer, compact: threading.Thread, out: list[httpx.Response]
) -> None:
    """The session is freed at once for the client that left; then the first compaction's
    call comes (``held``), and its ``/compact`` is answered 200; then a poll of the claim
    has had its time."""
    try:
        # held, the session would stay so until the call's patience (``PATIENCE``) ran out
        freed = wait_for(lambda: s.proxy.queued(TENANT, SID) == 0, 10)
        assert freed, "the session stayed held for a client that had left"
    finally:
        held.allow(20)
    compact.join(15)
    assert out and out[0].status_code == 200, out[0].text if out else "no answer"
    time.sleep(0.6)  # a poll of the claim lands at most 0.5 s after it is freed


def test_a_stream_whose_client_leaves_while_it_waits_for_a_compaction_ends_there(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    held = Pacer(PATIENCE, first=True)  # /compact's summary, until the test lets it come
    model = Model(fast_pacer=held)
    summarize = {**SUMMARIZE, "softFraction": 0.6, "hardFraction": 0.6}
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=summarize) as s:
        agent = Agent(s.client(SID))
        for i, size in enumerate((300, 300, 800)):  # /compact folds the first two turns
            agent.say(words(size, f"t{i}"))
        s.replied(SID)
        out: list[httpx.Response] = []
        compact = _compact(s, SID, out)
        wait_until(lambda: len(model.fast_times) == 1, 10, "the summariser's call")
        agent.say(words(200, "m"))
        big = {"role": "user", "content": words(1500, "big")}  # over 0.6 of 4000 after it too
        body = {"model": MAIN, "messages": [*agent.messages, big], "stream": True}
        _leave_at_the_first_keep_alive(s, body)
        _freed_then_first_answered(s, held, compact, out)
        assert len(model.fast_times) == 1, "a compaction ran for a client that had left"
        assert len(s.main_bodies()) == 4  # the agent's four turns; none for the one that left
        assert [r["version"] for r in s.summaries(SID)] == [1]


def test_a_compact_command_whose_client_leaves_while_another_compaction_runs_compacts_nothing(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """A chat message ``/compact`` waits for the compaction in flight as ``POST /compact``
    does, and its client leaving then ends it the same way: nothing compacted after it."""
    held = Pacer(PATIENCE, first=True)
    model = Model(fast_pacer=held)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=SUMMARIZE) as s:
        agent = Agent(s.client(SID))
        for i in range(3):
            agent.say(words(200, f"t{i}"))
        s.replied(SID)
        out: list[httpx.Response] = []
        compact = _compact(s, SID, out)
        wait_until(lambda: len(model.fast_times) == 1, 10, "the first compaction's call")
        agent.say("meanwhile")  # more to fold once the first compaction is done
        s.replied(SID)
        command = {"role": "user", "content": "/compact"}
        body = {"model": MAIN, "messages": [*agent.messages, command], "stream": True}
        _leave_at_the_first_keep_alive(s, body)
        _freed_then_first_answered(s, held, compact, out)
        assert len(model.fast_times) == 1, "the compaction ran for a client that had left"
        assert [r["version"] for r in s.summaries(SID)] == [1]


def test_a_chat_not_streamed_whose_client_leaves_while_it_waits_for_a_compaction_ends_there(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """With no keep-alive to write, the wait is watched all the same: the client's
    connection closing is the ``http.disconnect`` the watch hears."""
    held = Pacer(PATIENCE, first=True)
    model = Model(fast_pacer=held)
    summarize = {**SUMMARIZE, "softFraction": 0.6, "hardFraction": 0.6}
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=summarize) as s:
        agent = Agent(s.client(SID))
        for i, size in enumerate((300, 300, 800)):
            agent.say(words(size, f"t{i}"))
        s.replied(SID)
        out: list[httpx.Response] = []
        compact = _compact(s, SID, out)
        wait_until(lambda: len(model.fast_times) == 1, 10, "the summariser's call")
        agent.say(words(200, "m"))
        big = {"role": "user", "content": words(1500, "big")}
        body = {"model": MAIN, "messages": [*agent.messages, big]}
        headers = {"authorization": f"Bearer {CLIENT_KEY}", "x-session-id": SID}
        with httpx.Client(base_url=s.proxy.origin, headers=headers, timeout=0.5) as c:
            try:
                c.post("/v1/chat/completions", json=body)
                raise AssertionError("answered while the compaction was held")
            except httpx.ReadTimeout:
                pass  # the client gives up and closes its connection
        _freed_then_first_answered(s, held, compact, out)
        assert len(model.fast_times) == 1, "a compaction ran for a client that had left"
        assert len(s.main_bodies()) == 4  # the agent's four turns; none for the one that left
