"""Regression: a proxy key limited to some agents checks the session's agent as its chat
arrives, but the step started later, once the request had waited for the session, and
wrote the request's agent into the session without looking again. A request of the
limited key that waited behind one of an unlimited key moving the session to another agent
took the session over: its agent overwritten back to the key's, whose reads (the session
API, ``include_superseded``) then showed the other agent's messages. The statement that
takes the lease (``cascade_begin_step_v7``, migration 0028) now refuses it: a 403
``agent_not_allowed`` as the first check gives, with nothing of it stored and the agent left
as the other request set it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy, wait_for
from tests.integration.api.limited_keys import (
    FULL,
    LIMITED,
    TENANT,
    client,
    start_with_limited_key,
)
from tests.integration.conftest import column

SID = "raced"
QUEUE = "SELECT lease_queue FROM sessions WHERE id = $1"


def _on_thread(call: Callable[[], httpx.Response]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.setdefault("resp", call()))
    thread.start()
    return thread, out


def _chat(origin: str, key: str, agent: str, text: str, **body: Any) -> httpx.Response:
    with client(origin, key) as http:
        return http.post(
            "/v1/chat/completions",
            json={"model": agent, "messages": [{"role": "user", "content": text}], **body},
            headers={"x-session-id": SID},
            timeout=20,
        )


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_limited_request_waiting_behind_an_agent_change_is_refused_writing_nothing(
    replicas: int,
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    db_dsn: str,
) -> None:
    """One replica: B and L wait in its queue, B first. Two: B waits on the other replica,
    queued for the lease in the database (migration 0022), before L waits behind A on A's
    replica; once A ends, L's first try finds B ahead and queues too, and its next try finds
    the session B moved."""
    proxy = start_with_limited_key(start_proxy, fake_upstream, tmp_path, monkeypatch)
    other = (
        proxy
        if replicas == 1
        else start_with_limited_key(start_proxy, fake_upstream, tmp_path, monkeypatch)
    )
    origin = proxy.origin
    made = _chat(origin, FULL, "reviewer", "hello")  # the reviewer's session
    assert made.status_code == 200, made.text

    # A (unlimited, reviewer) holds the session mid-stream.
    pacer = Pacer()
    fake_upstream.script(reply("slow", chunks=2, pacer=pacer))
    asked = len(fake_upstream.requests)
    a, a_out = _on_thread(lambda: _chat(origin, FULL, "reviewer", "slow", stream=True))
    fake_upstream.wait_for_requests(asked + 1, 20)
    # B (unlimited, coder) waits for it first, then L (limited to reviewer), whose check
    # as it arrives sees the reviewer's session and passes.
    b, b_out = _on_thread(lambda: _chat(other.origin, FULL, "coder", "to the coder"))
    if replicas == 1:
        assert wait_for(lambda: proxy.queued(TENANT, SID) == 2, timeout=10), "B never waited"
    else:
        assert wait_for(lambda: any(column(db_dsn, QUEUE, SID)), timeout=10), "B never queued"
    lim, l_out = _on_thread(lambda: _chat(origin, LIMITED, "reviewer", "take it over"))
    behind = 3 if replicas == 1 else 2
    assert wait_for(lambda: proxy.queued(TENANT, SID) == behind, timeout=10), "L never waited"
    # A ends; B moves the session to the coder; then L's step starts.
    pacer.allow(10)
    for thread in (a, b, lim):
        thread.join(20)
        assert not thread.is_alive()
    assert not pacer.expired
    assert a_out["resp"].status_code == 200, a_out["resp"].text
    assert b_out["resp"].status_code == 200, b_out["resp"].text

    refused = l_out["resp"]
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("request_forbidden", "agent_not_allowed")
    assert SID in error["message"] and "'coder'" in error["message"]
    assert column(db_dsn, "SELECT agent FROM sessions WHERE id = $1", SID) == ["coder"]
    assert column(db_dsn, "SELECT lease_owner FROM sessions WHERE id = $1", SID) == [None]
    assert column(db_dsn, QUEUE, SID) == [None]  # nobody waits: L gave up its place
    stored = column(db_dsn, "SELECT message::text FROM messages WHERE session_id = $1", SID)
    assert stored and not [m for m in stored if "take it over" in m]
    assert not [r for r in fake_upstream.requests if "take it over" in str(r.json)]
    # The session answers its next request, the coder's, and still refuses the limited key.
    assert _chat(origin, FULL, "coder", "next").status_code == 200
    assert _chat(origin, LIMITED, "reviewer", "again").status_code == 403
