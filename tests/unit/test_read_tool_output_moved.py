"""Regression: the proxy's own ``read_tool_output`` read a session's stored outputs for a
key limited to some agents without looking at the session's agent again. The read runs
under the step's lease, which a move must take first; but a lease that lapsed under a long
request lets another key's request move the session meanwhile, and the model then read
what that agent's requests stored, or was told no output exists under the id (an answer
that hung on the race and said what the moved session holds). Now, for a limited key, the
read is followed by a read of the session's agent, and one the key may not use makes the
answer the refusal the key's next request gets, whatever the id."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from proxy.services import toolloop
from proxy.store import sessions
from tests.unit.raw_reads import stub_reads

STORED = {"call_ls": {"content": "a.txt\nb.txt", "original_bytes": 11, "capped": False}}


def _call(target: str) -> dict[str, Any]:
    arguments = json.dumps({"id": target})
    return {"id": "r1", "function": {"name": "read_tool_output", "arguments": arguments}}


@pytest.fixture
def agent_now(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The session's agent as the read after the output's read sees it (settable)."""
    now = ["coder"]

    async def fetchrow_raw_output(conn: Any, **key: Any) -> dict[str, Any] | None:
        return STORED.get(key["tool_call_id"])

    async def fetchval_agent(conn: Any, **key: Any) -> str | None:
        return now[0]

    async def fetchval_version(conn: Any, **key: Any) -> str:
        return str(uuid.uuid4())  # never a kept text's: each read is the stub's

    stub_reads(monkeypatch, fetchrow_raw_output, fetchval_version)
    monkeypatch.setattr(sessions, "fetchval_agent", fetchval_agent)
    return now


async def _answer(target: str, agents: tuple[str, ...] | None) -> str:
    message = await toolloop.answer_call(
        object(), tenant="t", session_id="s", call=_call(target), max_chars=1000, agents=agents
    )
    return str(message["content"])


async def test_a_limited_keys_read_of_a_moved_session_is_refused_whatever_the_id(
    agent_now: list[str],
) -> None:
    found = await _answer("call_ls", ("reviewer",))
    missing = await _answer("call_none", ("reviewer",))
    assert found == missing
    assert "a.txt" not in found and "no stored output" not in missing
    assert "agent 'coder'" in found and "may not use" in found


async def test_a_read_of_a_session_the_key_still_reaches_is_answered(
    agent_now: list[str],
) -> None:
    agent_now[0] = "reviewer"
    assert "a.txt" in await _answer("call_ls", ("reviewer",))
    assert "no stored output" in await _answer("call_none", ("reviewer",))
    agent_now[0] = "coder"  # a key without ``agents`` reads every session of its tenant
    assert "a.txt" in await _answer("call_ls", None)
