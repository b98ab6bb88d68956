"""Regression: a compaction is built with the settings of the agent its session had (its
fast model and provider, ``summarize``, the memory scope it promotes to). A session moved to
another agent while the fast model answered still got the summary written, made by the old
agent's fast model under the old agent's settings, and one moved while the compaction waited
for its claim had the new agent's history sent to the old agent's fast model. The agent is
now checked where the summary is written (in the statement that writes it) and once the claim
is held: a move drops the summary, reported as ``context.compaction.failed`` with reason
``agent_changed``; a compaction asked for through the API is built again for the new agent."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import Pacer
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, Model, wait_until
from tests.integration.api.conftest import StartProxy
from tests.integration.api.limited_keys import (
    FULL,
    client,
    compact_in_thread,
    noting_arrival,
    reviewers_session,
)
from tests.integration.conftest import column

SID = "moved"
REVIEWER_FAST, CODER_FAST = "fast-reviewer", "fast-coder"
AGENTS = {
    "default": {"provider": "openai"},
    "coder": {"provider": "openai", "fastModel": CODER_FAST},
    "reviewer": {"provider": "openai", "fastModel": REVIEWER_FAST},
}
NAMES = "SELECT name FROM events WHERE session_id = $1 AND name LIKE $2 ORDER BY id"
DATA = "SELECT data::text FROM events WHERE session_id = $1 AND name = $2"


def _start(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Any, Model, Pacer, Agent]:
    held = Pacer(first=True)  # the first briefing, until the test lets it come
    model = Model(fast=(REVIEWER_FAST, CODER_FAST), fast_pacer=held)
    proxy, agent = reviewers_session(
        start_proxy, fake_upstream, tmp_path, monkeypatch, sid=SID, agents=AGENTS, model=model
    )
    return proxy, model, held, agent


def _post(origin: str, name: str, out: dict[str, httpx.Response]) -> threading.Thread:
    return compact_in_thread(origin, FULL, SID, out, name)


def _fast_models(fake_upstream: FakeUpstream) -> list[str]:
    sent = [r.json.get("model") for r in fake_upstream.requests]
    return [m for m in sent if m in (REVIEWER_FAST, CODER_FAST)]


def test_a_session_moved_during_the_summary_call_gets_no_summary(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    db_dsn: str,
) -> None:
    proxy, model, held, agent = _start(start_proxy, fake_upstream, tmp_path, monkeypatch)
    answers: dict[str, httpx.Response] = {}
    first = _post(proxy.origin, "first", answers)
    wait_until(lambda: len(model.fast_times) == 1, 10, "the reviewer's fast call")

    agent.model = "coder"
    agent.say("over to the coder")  # the session moves while the briefing is awaited
    assert column(db_dsn, "SELECT agent FROM sessions WHERE id = $1", SID) == ["coder"]
    held.allow(10)
    first.join(30)
    assert not first.is_alive()

    answer = answers["first"]
    assert answer.status_code == 200, answer.text
    assert answer.json()["compacted"] is False
    assert "coder" in answer.json()["reason"]
    assert column(db_dsn, "SELECT version FROM summaries WHERE session_id = $1", SID) == []
    assert column(db_dsn, NAMES, SID, "context.compaction.%") == [
        "context.compaction.started",
        "context.compaction.failed",
    ]
    (failed,) = [json.loads(d) for d in column(db_dsn, DATA, SID, "context.compaction.failed")]
    assert failed["reason"] == "agent_changed"
    assert "retry_in_seconds" not in failed  # no backoff: the coder's compaction may run now
    assert _fast_models(fake_upstream) == [REVIEWER_FAST]

    # the coder's own compaction runs, with the coder's fast model
    with client(proxy.origin, FULL) as http:
        again = http.post(f"/v1/sessions/{SID}/compact", timeout=30)
    assert again.status_code == 200, again.text
    assert again.json()["compacted"] is True
    assert _fast_models(fake_upstream) == [REVIEWER_FAST, CODER_FAST]
    model_of = "SELECT model FROM summaries WHERE session_id = $1"
    assert column(db_dsn, model_of, SID) == [CODER_FAST]


def test_a_compact_that_waited_while_the_session_moved_uses_the_new_agent(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    db_dsn: str,
) -> None:
    proxy, model, held, agent = _start(start_proxy, fake_upstream, tmp_path, monkeypatch)
    answers: dict[str, httpx.Response] = {}
    first = _post(proxy.origin, "first", answers)  # holds the claim while its briefing is held
    wait_until(lambda: len(model.fast_times) == 1, 10, "the reviewer's fast call")
    # built for the reviewer: now it waits for the claim
    arrived = noting_arrival(proxy, monkeypatch)
    second = _post(proxy.origin, "second", answers)
    assert arrived.wait(10), "the second compact never reached the summarizer"

    agent.model = "coder"
    agent.say("over to the coder")
    held.allow(10)
    for thread in (first, second):
        thread.join(30)
        assert not thread.is_alive()

    assert answers["first"].json()["compacted"] is False  # moved during its call
    assert answers["second"].status_code == 200, answers["second"].text
    assert answers["second"].json()["compacted"] is True
    # the coder's history never went to the reviewer's fast model
    assert _fast_models(fake_upstream) == [REVIEWER_FAST, CODER_FAST]
    model_of = "SELECT model FROM summaries WHERE session_id = $1"
    assert column(db_dsn, model_of, SID) == [CODER_FAST]
