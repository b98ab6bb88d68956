"""Regression: ``POST /v1/sessions/{id}/compact`` of a proxy key limited to some agents
checked the session's agent as it arrived only. A compact that waited for the compaction in
flight, while a request of another key moved the session to another agent, then compacted
that agent's session: its history sent to the fast model of the agent the key had found,
its summary written into the other agent's session. The compaction now reads the agent
again once it holds its claim, and answers the 403 ``agent_not_allowed`` the arrival check
gives, nothing read, reported or written."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.replies import Pacer
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import FAST, Agent, Model, wait_until, words
from tests.integration.api.conftest import StartProxy
from tests.integration.api.limited_keys import FULL, LIMITED, client, start_with_limited_key
from tests.integration.conftest import column

SID = "compacted"
AGENTS = {
    name: {"provider": "openai", "fastModel": FAST} for name in ("default", "coder", "reviewer")
}


def _post(origin: str, key: str, out: dict[str, httpx.Response]) -> threading.Thread:
    def run() -> None:
        with client(origin, key) as http:
            out[key] = http.post(f"/v1/sessions/{SID}/compact", timeout=30)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_limited_compact_waiting_behind_an_agent_change_is_refused_doing_nothing(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    db_dsn: str,
) -> None:
    held = Pacer(first=True)  # the first compaction's briefing, until the test lets it come
    model = Model(fast_pacer=held)
    fake_upstream.default = model
    proxy = start_with_limited_key(
        start_proxy,
        fake_upstream,
        tmp_path,
        monkeypatch,
        agents=AGENTS,
        context={"summarize": {"keepRecent": 2}},
    )
    full = openai.OpenAI(
        base_url=proxy.url,
        api_key=FULL,
        max_retries=0,
        default_headers={"X-Session-Id": SID},
        timeout=20,
    )
    agent = Agent(full, model="reviewer")
    for i in range(3):
        agent.say(words(200, f"t{i}"))  # the reviewer's session, with something to fold

    answers: dict[str, httpx.Response] = {}
    first = _post(proxy.origin, FULL, answers)  # holds the claim while its briefing is held
    wait_until(lambda: len(model.fast_times) == 1, 10, "the first compaction's fast call")
    summarizer = proxy.state("summarizer")
    arrived = threading.Event()
    compact_now = summarizer.compact_now

    # past the key's check as it arrived: now it waits
    async def noted(job: Any, pause: Any = None) -> Any:
        arrived.set()
        return await compact_now(job, pause)

    monkeypatch.setattr(summarizer, "compact_now", noted)
    limited = _post(proxy.origin, LIMITED, answers)
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
