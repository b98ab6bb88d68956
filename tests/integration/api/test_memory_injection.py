"""Stored facts reach the upstream prompt as a ``<memory>`` block that changes only at a turn
boundary (a new user message), and is never stored as a client's message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.fakes.strict_openai import violations
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import write_config
from tests.integration.api.memory_suggestions import CLIENT_TENANT, suggest
from tests.integration.conftest import run_sync


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    """Memory is opt-in: ``memoryPromotion.mode`` other than off turns injection on."""
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        agents={
            "default": {"provider": "openai"},
            "coder": {"provider": "openai"},
            "reasoner": {"provider": "openai", "model": "o1-mini"},  # a name the client uses
        },
        context={"memoryPromotion": {"mode": "suggest"}},
    )


CALL = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}


def _chat(http: httpx.Client, sid: str, messages: list[dict[str, Any]]) -> None:
    r = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": sid},
        json={"model": "m", "messages": messages},
    )
    assert r.status_code == 200, r.text


def _first(fake: FakeUpstream) -> dict[str, Any]:
    return fake.bodies()[-1]["messages"][0]  # type: ignore[no-any-return]


def test_the_block_is_kept_through_a_turn_and_renewed_at_the_next(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    assert http.post("/v1/memory", json={"text": "The port is 8443"}).status_code == 201
    turn = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "which port?"},
    ]
    _chat(http, "mem-1", turn)
    first = _first(fake_upstream)
    assert first["role"] == "system" and first["content"].startswith("You are terse.\n\n<memory>")
    assert "- The port is 8443\n" in first["content"]

    # a fact added mid-turn waits for the next user message
    assert http.post("/v1/memory", json={"text": "The build uses uv"}).status_code == 201
    turn += [
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt b.txt"},
    ]
    _chat(http, "mem-1", turn)
    assert _first(fake_upstream) == first
    prev, now = fake_upstream.bodies()[-2:]
    assert now["messages"][: len(prev["messages"])] == prev["messages"]

    turn += [
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "and the build?"},
    ]
    _chat(http, "mem-1", turn)
    renewed = _first(fake_upstream)["content"]
    assert "- The port is 8443\n- The build uses uv\n" in renewed

    # the next turn with the same facts sends the same bytes
    turn += [{"role": "assistant", "content": "uv"}, {"role": "user", "content": "thanks"}]
    _chat(http, "mem-1", turn)
    assert _first(fake_upstream)["content"] == renewed

    stored = http.get("/v1/sessions/mem-1/messages").json()["data"]
    assert stored[0]["message"]["content"] == "You are terse."
    assert not any("<memory>" in str(m["message"]) for m in stored)


def test_without_a_system_message_the_block_becomes_one(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    http.post("/v1/memory", json={"text": "The port is 8443"})
    _chat(http, "mem-2", [{"role": "user", "content": "hi"}])
    messages = fake_upstream.bodies()[-1]["messages"]
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("<memory>")
    assert messages[1] == {"role": "user", "content": "hi"}


def test_for_a_model_without_system_messages_the_block_is_a_user_message(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """o1-mini answers any system message with 400 ``unsupported_value``: a client of it
    sends none, and the proxy's own block must not be the one it refuses."""
    fake_upstream.validator = violations
    http.post("/v1/memory", json={"text": "The port is 8443"})
    r = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": "mem-o1"},
        json={"model": "o1-mini", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert r.status_code == 200, r.text
    messages = fake_upstream.bodies()[-1]["messages"]
    assert messages[0]["role"] == "user" and messages[0]["content"].startswith("<memory>")
    assert messages[1] == {"role": "user", "content": "hi"}
    assert fake_upstream.violations == []


def test_a_model_renamed_to_one_without_system_messages_gets_the_block_as_a_user_message(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """The rule reads the name sent upstream (``agents.<name>.model``), not the client's."""
    fake_upstream.validator = violations
    http.post("/v1/memory", json={"text": "The port is 8443"})
    turn = [{"role": "user", "content": "hi"}]
    r = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": "mem-renamed"},
        json={"model": "reasoner", "messages": turn},
    )
    assert r.status_code == 200, r.text
    sent = fake_upstream.bodies()[-1]
    assert sent["model"] == "o1-mini"
    assert sent["messages"][0]["role"] == "user", sent["messages"]
    assert sent["messages"][0]["content"].startswith("<memory>")
    assert fake_upstream.violations == []


def test_no_facts_no_block_and_facts_stay_with_their_tenant(
    http: httpx.Client, fake_upstream: FakeUpstream, proxy: Any
) -> None:
    with httpx.Client(
        base_url=proxy.origin, timeout=10, headers={"authorization": "Bearer sk-someone-else"}
    ) as other:
        other.post("/v1/memory", json={"text": "Someone else's fact"})
    _chat(http, "mem-3", [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}])
    assert fake_upstream.bodies()[-1]["messages"][0] == {"role": "system", "content": "S"}


def test_an_agent_scope_reaches_only_its_agent(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    r = http.post("/v1/memory", json={"scope": "agent:coder", "text": "Coder only"})
    assert r.status_code == 201, r.text
    _chat(http, "mem-4", [{"role": "user", "content": "hi"}])
    assert fake_upstream.bodies()[-1]["messages"][0]["role"] == "user"


def test_agent_default_facts_do_not_reach_the_default_agents_prompt(
    http: httpx.Client, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """The ``default`` agent has no scope of its own (its promoted facts go to ``global``):
    a row stored in ``agent:default`` before adding there was refused is listed, for its
    owner to move or delete, but rides in no prompt."""
    _chat(http, "mem-6", [{"role": "user", "content": "hi"}])
    run_sync(_insert(db_dsn, "agent:default", "Default only"))
    assert http.post("/v1/memory", json={"text": "Everyone's"}).status_code == 201
    _chat(
        http,
        "mem-6",
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "what do you remember?"},
        ],
    )
    block = _first(fake_upstream)["content"]
    assert "- Everyone's\n" in block and "Default only" not in block
    listed = http.get("/v1/memory", params={"scope": "agent:default"}).json()["data"]
    assert [f["text"] for f in listed] == ["Default only"]


async def _insert(dsn: str, scope: str, text: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "INSERT INTO memory (tenant, scope, fact) VALUES ($1, $2, $3)",
            CLIENT_TENANT,
            scope,
            text,
        )
    finally:
        await conn.close()


def test_an_accepted_suggestion_is_in_the_next_prompts_block(
    http: httpx.Client, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    _chat(http, "mem-5", [{"role": "user", "content": "hi"}])
    suggest(db_dsn, "mem-5", "sug-x", ["The deploy target is eu-west-1"])
    assert http.post("/v1/memory/suggestions/sug-x/accept").status_code == 200
    _chat(
        http,
        "mem-5",
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "where do we deploy?"},
        ],
    )
    first = fake_upstream.bodies()[-1]["messages"][0]
    assert first["role"] == "system" and "- The deploy target is eu-west-1\n" in first["content"]


def test_no_block_and_no_read_while_memory_is_off(
    http: httpx.Client, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    assert http.post("/v1/memory", json={"text": "The port is 8443"}).status_code == 201
    write_config(
        tmp_path / "agents.json", fake_upstream.url, context={"memoryPromotion": {"mode": "off"}}
    )
    for _ in range(100):  # the reload lands shortly after the file changes
        _chat(
            http,
            "mem-off",
            [{"role": "system", "content": "S"}, {"role": "user", "content": "which port?"}],
        )
        if "<memory>" not in _first(fake_upstream)["content"]:
            break
    assert _first(fake_upstream)["content"] == "S"


def test_a_client_resending_the_prompt_it_was_sent_gets_one_block(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """A client that resends the prompt the proxy sent (a Cascade behind another proxy that
    logs and replays it) holds the block in its system message: it is not added again, so
    the system message stops changing and the history stops being superseded."""
    assert http.post("/v1/memory", json={"text": "The port is 8443"}).status_code == 201
    history = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "which port?"},
    ]
    for turn in range(3):
        _chat(http, "mem-view", history)
        sent = fake_upstream.bodies()[-1]["messages"]
        assert sent[0]["content"].count("<memory>") == 1, sent[0]["content"]
        history = [
            *sent,
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": f"q{turn}"},
        ]
    # the first resend supersedes the three rows it changed the system message of; no more
    assert http.get("/v1/sessions/mem-view").json()["superseded_count"] == 3


def test_a_resending_client_without_a_system_prompt_loses_a_deleted_fact(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """A client without a system message that resends the prompt it was sent holds the
    proxy's own system message, the block alone: once the last fact is deleted the prompt
    leaves that message out (not sent empty, not with the deleted fact), and the stored
    rows keep the client's text as it sent it."""
    fact = http.post("/v1/memory", json={"text": "The port is 8443"}).json()
    _chat(http, "mem-alone", [{"role": "user", "content": "which port?"}])
    sent = fake_upstream.bodies()[-1]["messages"]
    assert sent[0]["role"] == "system" and "8443" in sent[0]["content"]
    assert http.delete(f"/v1/memory/{fact['id']}").status_code == 200
    history = [*sent, {"role": "assistant", "content": "8443"}, {"role": "user", "content": "ok"}]
    _chat(http, "mem-alone", history)
    now = fake_upstream.bodies()[-1]["messages"]
    assert not any("8443" in str(m.get("content")) for m in now[:-2]), now
    assert now[0]["role"] == "user" and now[-1]["content"] == "ok"
    rows = http.get("/v1/sessions/mem-alone/messages").json()["data"]
    assert rows[0]["message"] == sent[0]  # the client's text, as it sent it
