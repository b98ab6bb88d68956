"""Regression: a proxy key limited to some agents checks the session's agent as its chat
arrives, but the step started later, once the request had waited for the session, and
wrote the request's agent into the session without looking again. A request of the
limited key that waited behind one of an unlimited key moving the session to another agent
took the session over: its agent overwritten back to the key's, whose reads (the session
API, ``include_superseded``) then showed the other agent's messages. The statement that
takes the lease (``cascade_begin_step_v7``, migration 0028) now refuses it: a 403
``agent_not_allowed`` as the first check gives, with nothing of it stored and the agent left
as the other request set it. A reset, delete or branch of the limited key had the same gap
and now looks again under the session's row lock (``store.sessions``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, StartProxy, wait_for
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


def _race(
    proxy: ProxyServer,
    other: ProxyServer,
    fake: FakeUpstream,
    db_dsn: str,
    limited: Callable[[], httpx.Response],
) -> httpx.Response:
    """A (unlimited, reviewer) holds the reviewer's session mid-stream on ``proxy``; B
    (unlimited, coder) waits for it on ``other``, then ``limited`` (the limited key's
    request, reviewer only) waits on ``proxy``, its check as it arrives passing on the
    reviewer's session. A ends, B moves the session to the coder, then ``limited`` goes:
    what it answered. On one replica B and L wait in its queue, B first; on two, B waits
    queued for the lease in the database (migration 0022) before L waits behind A."""
    made = _chat(proxy.origin, FULL, "reviewer", "hello")  # the reviewer's session
    assert made.status_code == 200, made.text
    pacer = Pacer()
    fake.script(reply("slow", chunks=2, pacer=pacer))
    asked = len(fake.requests)
    a, a_out = _on_thread(lambda: _chat(proxy.origin, FULL, "reviewer", "slow", stream=True))
    fake.wait_for_requests(asked + 1, 20)
    b, b_out = _on_thread(lambda: _chat(other.origin, FULL, "coder", "to the coder"))
    if other is proxy:
        assert wait_for(lambda: proxy.queued(TENANT, SID) == 2, timeout=10), "B never waited"
    else:
        assert wait_for(lambda: any(column(db_dsn, QUEUE, SID)), timeout=10), "B never queued"
    lim, l_out = _on_thread(limited)
    behind = 3 if other is proxy else 2
    assert wait_for(lambda: proxy.queued(TENANT, SID) == behind, timeout=10), "L never waited"
    pacer.allow(10)
    for thread in (a, b, lim):
        thread.join(20)
        assert not thread.is_alive()
    assert not pacer.expired
    assert a_out["resp"].status_code == 200, a_out["resp"].text
    assert b_out["resp"].status_code == 200, b_out["resp"].text
    refused: httpx.Response = l_out["resp"]
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("request_forbidden", "agent_not_allowed")
    assert SID in error["message"] and "'coder'" in error["message"]
    assert column(db_dsn, "SELECT agent FROM sessions WHERE id = $1", SID) == ["coder"]
    assert column(db_dsn, QUEUE, SID) == [None]  # nobody waits: L gave up its place
    # B's step ends (its lease freed as it stores the answer it already sent); L took none.
    free = "SELECT lease_owner IS NULL FROM sessions WHERE id = $1"
    assert wait_for(lambda: column(db_dsn, free, SID) == [True], timeout=10)
    return refused


def _stored(db_dsn: str) -> list[str]:
    return column(db_dsn, "SELECT message::text FROM messages WHERE session_id = $1", SID)


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_limited_chat_waiting_behind_an_agent_change_is_refused_writing_nothing(
    replicas: int,
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    db_dsn: str,
) -> None:
    proxy = start_with_limited_key(start_proxy, fake_upstream, tmp_path, monkeypatch)
    other = (
        proxy
        if replicas == 1
        else start_with_limited_key(start_proxy, fake_upstream, tmp_path, monkeypatch)
    )
    _race(
        proxy,
        other,
        fake_upstream,
        db_dsn,
        lambda: _chat(proxy.origin, LIMITED, "reviewer", "take it over"),
    )
    stored = _stored(db_dsn)
    assert stored and not [m for m in stored if "take it over" in m]
    assert not [r for r in fake_upstream.requests if "take it over" in str(r.json)]
    # The session answers its next request, the coder's, and still refuses the limited key.
    assert _chat(proxy.origin, FULL, "coder", "next").status_code == 200
    assert _chat(proxy.origin, LIMITED, "reviewer", "again").status_code == 403


@pytest.mark.parametrize("op", ["reset", "delete", "branch", "compact"])
def test_a_limited_operation_waiting_behind_an_agent_change_is_refused_doing_nothing(
    op: str,
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    db_dsn: str,
) -> None:
    """Reset, delete, branch and compact check the key as they arrive too, then wait their
    turn on the session: the one that found it moved to another agent meanwhile forgot,
    deleted or copied that agent's history. They look again under the row lock."""
    proxy = start_with_limited_key(start_proxy, fake_upstream, tmp_path, monkeypatch)

    def operate() -> httpx.Response:
        with client(proxy.origin, LIMITED) as http:
            if op == "delete":
                return http.delete(f"/v1/sessions/{SID}", timeout=20)
            body = {"id": "copied"} if op == "branch" else None
            return http.post(f"/v1/sessions/{SID}/{op}", json=body, timeout=20)

    _race(proxy, proxy, fake_upstream, db_dsn, operate)
    assert len(_stored(db_dsn)) == 6  # hello, slow, to the coder and their answers
    assert column(db_dsn, "SELECT id FROM sessions ORDER BY id") == [SID]
