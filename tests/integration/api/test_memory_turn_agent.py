"""Regression: the per-turn values a session keeps (its ``<memory>`` block among them) were
named by the turn alone, so a request that moved the session to another agent within the
turn (an assistant step and its tool result later, ``model`` naming the other agent) was
sent the first agent's block: the facts of ``agent:coder`` went to the reviewer's prompt,
and to its provider, which that scope keeps them from. A turn's values are now kept for
the agent that computed them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import write_config

AGENTS = {
    "default": {"provider": "openai"},
    "coder": {"provider": "openai"},
    "reviewer": {"provider": "openai"},
}


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        agents=AGENTS,
        context={"memoryPromotion": {"mode": "suggest"}},
    )


CALL = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}


def _system(http: httpx.Client, fake: FakeUpstream, model: str, messages: list[Any]) -> str:
    sent = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": "turn-agents"},
        json={"model": model, "messages": messages},
    )
    assert sent.status_code == 200, sent.text
    first = fake.bodies()[-1]["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


def test_a_turn_moved_to_another_agent_gets_that_agents_facts(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    for scope, text in (("agent:coder", "Coder secret"), ("agent:reviewer", "Reviewer rule")):
        assert http.post("/v1/memory", json={"scope": scope, "text": text}).status_code == 201
    turn: list[Any] = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "look around"},
    ]
    assert "- Coder secret\n" in _system(http, fake_upstream, "coder", turn)
    turn += [
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
    ]
    reviewer = _system(http, fake_upstream, "reviewer", turn)
    assert "Coder secret" not in reviewer
    assert "- Reviewer rule\n" in reviewer
    assert http.get("/v1/sessions/turn-agents").json()["agent"] == "reviewer"
