"""Regression: ``POST /v1/sessions/{id}/compact`` of a proxy key limited to some agents
checked the session's agent as it arrived only. A compact that waited for the compaction in
flight, while a request of another key moved the session to another agent, then compacted
that agent's session: its history sent to the fast model of the agent the key had found,
its summary written into the other agent's session. The compaction now reads the agent
again once it holds its claim, and answers the 403 ``agent_not_allowed`` the arrival check
gives, nothing read, reported or written."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.fakes.replies import Pacer
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import FAST, Model, wait_until
from tests.integration.api.conftest import StartProxy
from tests.integration.api.limited_keys import (
    FULL,
    LIMITED,
    client,
    compact_in_thread,
    noting_arrival,
    reviewers_session,
)
from tests.integration.conftest import column

SID = "compacted"
AGENTS = {
    name: {"provider": "openai", "fastModel": FAST} for name in ("default", "coder", "reviewer")
}


def test_a_limited_compact_waiting_behind_an_agent_change_is_refused_doing_nothing(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    db_dsn: str,
) -> None:
    held = Pacer(first=True)  # the first compaction's briefing, until the test lets it come
    model = Model(fast_pacer=held)
    proxy, agent = reviewers_session(
        start_proxy, fake_upstream, tmp_path, monkeypatch, sid=SID, agents=AGENTS, model=model
    )

    answers: dict[str, httpx.Response] = {}
    # holds the claim while its briefing is held
    first = compact_in_thread(proxy.origin, FULL, SID, answers)
    wait_until(lambda: len(model.fast_times) == 1, 10, "the first compaction's fast call")
    # past the key's check as it arrived: now it waits
    arrived = noting_arrival(proxy, monkeypatch)
    limited = compact_in_thread(proxy.origin, LIMITED, SID, answers)
    assert arrived.wait(10), "the limited key's compact never reached the summarizer"

    agent.model = "coder"
    agent.say("over to the coder")  # an unlimited key moves the session to the coder
    assert column(db_dsn, "SELECT agent FROM sessions WHERE id = $1", SID) == ["coder"]
    held.allow(10)
    for thread in (first, limited):
        thread.join(30)
        assert not thread.is_alive()

    assert answers[FULL].status_code == 200, answers[FULL].text
    refused = answers[LIMITED]
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("request_forbidden", "agent_not_allowed")
    assert SID in error["message"] and "'coder'" in error["message"]
    assert len(model.fast_times) == 1  # the coder's history never went to a fast model
    # the first one's summary, made for the reviewer, is not written into the coder's session
    assert answers[FULL].json()["compacted"] is False
    assert column(db_dsn, "SELECT version FROM summaries WHERE session_id = $1", SID) == []
    started = "SELECT count(*) FROM events WHERE session_id = $1 AND name = $2"
    assert column(db_dsn, started, SID, "context.compaction.started") == [1]
    # the claim is free: the coder's next compaction (an unlimited key's) runs
    with client(proxy.origin, FULL) as http:
        assert http.post(f"/v1/sessions/{SID}/compact", timeout=30).status_code == 200
