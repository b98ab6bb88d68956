"""A provider's answer whose ``tool_calls`` cannot be read as tool calls, through the real proxy.

A stream ends as a cut one does: what came before the malformed chunk, one OpenAI-shaped error
frame and ``[DONE]``, no reply stored; a JSON answer is an OpenAI-shaped 502. Either way the
log names the provider and what was wrong, never the content.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from tests.fakes.replies import raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import Records, wait_for
from tests.integration.api.sessions_helpers import live_messages
from tests.integration.api.sse_frames import DONE, _data_frames, _payload, stream_chat

SECRET = "sekrit-argument-text"

MALFORMED: dict[str, Any] = {
    "string": SECRET,
    "non-object": [SECRET],
    "function-not-object": [{"index": 0, "id": "c1", "function": SECRET}],
    "arguments-not-string": [
        {"index": 0, "id": "c1", "function": {"name": "f", "arguments": {"a": SECRET}}}
    ],
    "index-not-int": [{"index": "0", "id": "c1", "function": {"name": "f", "arguments": SECRET}}],
}
_HEAD = {"id": "c-bad", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def _frame(delta: dict[str, Any], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return f"data: {json.dumps({**_HEAD, 'choices': [choice]})}\n\n"


def _logged(records: Records) -> str:
    return "\n".join(r.getMessage() for r in records.records if r.levelno >= logging.WARNING)


@pytest.mark.parametrize("calls", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_stream_with_malformed_tool_calls_ends_with_an_error_frame_and_stores_nothing(
    http: httpx.Client, fake_upstream: FakeUpstream, records: Records, calls: Any
) -> None:
    sid = "bad-stream"
    turn = [{"role": "user", "content": "go"}]
    opening = _frame({"role": "assistant", "content": "ok"})
    bad = _frame({"tool_calls": calls})
    fake_upstream.script(raw(opening, bad, _frame({}, "tool_calls"), "data: [DONE]\n\n"))
    resp = stream_chat(http, sid, turn)
    assert resp.status_code == 200
    frames = _data_frames(resp.content)
    assert _payload(frames[0])["choices"][0]["delta"] == {"role": "assistant", "content": "ok"}
    err = _payload(frames[1])["error"]
    assert set(err) == {"message", "type", "param", "code"} and "malformed" in err["message"]
    assert frames[2:] == [DONE] and SECRET not in err["message"]
    logged = _logged(records)
    assert "openai" in logged and "malformed" in logged and SECRET not in logged
    fake_upstream.script(reply("whole", chunks=1))
    again = stream_chat(http, sid, turn)
    assert b"whole" in again.content
    stored = wait_for(lambda: (live := live_messages(http, sid)) and len(live) >= 2 and live)
    assert stored == [*turn, {"role": "assistant", "content": "whole"}]


@pytest.mark.parametrize("calls", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_json_answer_with_malformed_tool_calls_is_a_502(
    http: httpx.Client, fake_upstream: FakeUpstream, records: Records, calls: Any
) -> None:
    sid = "bad-json"
    turn = [{"role": "user", "content": "go"}]
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    completion = {
        **_HEAD,
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
    }
    fake_upstream.script(raw(json.dumps(completion), headers={"content-type": "application/json"}))
    resp = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": sid},
        json={"model": "gpt-fake", "messages": turn},
    )
    assert resp.status_code == 502
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and "malformed" in err["message"]
    assert SECRET not in err["message"]
    logged = _logged(records)
    assert "openai" in logged and "malformed" in logged and SECRET not in logged
    assert "Traceback" not in logged
    assert live_messages(http, sid) in ([], turn)
