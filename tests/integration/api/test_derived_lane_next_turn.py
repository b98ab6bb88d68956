"""A client that names no session and sends each turn the moment the last answer arrives
keeps one session (README, Decisions: lanes of a derived session).

The proxy stores a non-streamed reply after the response is sent, and a stream's after its
last chunk, so the next turn can arrive while the session is still held. It went to a lane
(``auto-….2``) then: one conversation split over two sessions, each with part of it. Here
the store is slowed down so that every next turn arrives during it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from proxy.store import steps

STORE_DELAY = 0.3


@pytest.fixture
def slow_store(monkeypatch: pytest.MonkeyPatch) -> None:
    record_step = steps.record_step

    async def slowly(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(STORE_DELAY)
        return await record_step(*args, **kwargs)

    monkeypatch.setattr(steps, "record_step", slowly)


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_each_next_turn_keeps_the_conversations_session(
    stream: bool, slow_store: None, client: openai.OpenAI
) -> None:
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    sessions = []
    for turn in range(3):
        history.append({"role": "user", "content": f"question {turn}"})
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-fake", messages=history, stream=stream
        )
        answer = raw.parse()
        text = (
            "".join(c.choices[0].delta.content or "" for c in answer if c.choices)
            if stream
            else answer.choices[0].message.content
        )  # type: ignore[union-attr]
        history.append({"role": "assistant", "content": text})
        sessions.append(raw.headers["x-session-id"])

    assert sessions[0].startswith("auto-")
    assert sessions == [sessions[0]] * 3
