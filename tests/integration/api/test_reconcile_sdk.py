"""History reconciliation by hash chain (DESIGN §4), end to end: the official SDK's round trip.

The reply the proxy stored matches what an SDK client sends back, however it echoes it (a
model dump, a plain dict, tool calls, a reassembled stream), so the next request takes the
fast path and supersedes nothing.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai

from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.reconcile_helpers import (
    MODEL,
    settled,
    user,
)


def sid_headers(sid: str) -> dict[str, Any]:
    return {"extra_headers": {"X-Session-Id": sid}}


ECHOES = {
    "model_dump_exclude_none": lambda m: m.model_dump(exclude_none=True),
    "model_dump": lambda m: m.model_dump(),
    "plain_dict": lambda m: {"role": "assistant", "content": m.content},
}


def test_sdk_echo_of_the_reply_takes_the_fast_path(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    for sid, echo in ECHOES.items():
        messages: list[Any] = [{"role": "system", "content": "sys"}, user("q1")]
        for turn in range(3):
            out = client.chat.completions.create(model=MODEL, messages=messages, **sid_headers(sid))
            messages += [echo(out.choices[0].message), user(f"q{turn + 2}")]
        client.chat.completions.create(model=MODEL, messages=messages, **sid_headers(sid))
        view = settled(http, sid, len(messages) + 1)
        assert view["superseded_count"] == 0, sid


def test_sdk_echo_of_tool_calls_takes_the_fast_path(
    client: openai.OpenAI, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    calls = [tool_call("grep", {"q": "x"}), tool_call("ls", {"path": "."})]
    fake_upstream.script(reply(None, tool_calls=calls), reply("done"))
    messages: list[Any] = [user("find x")]
    out = client.chat.completions.create(model=MODEL, messages=messages, **sid_headers("tc"))
    msg = out.choices[0].message
    assert msg.tool_calls is not None and len(msg.tool_calls) == 2
    messages.append(msg.model_dump(exclude_none=True))
    messages += [
        {"role": "tool", "tool_call_id": c.id, "content": f"result of {c.function.name}"}
        for c in msg.tool_calls
    ]
    client.chat.completions.create(model=MODEL, messages=messages, **sid_headers("tc"))
    assert settled(http, "tc", 5)["superseded_count"] == 0


def _accumulate(stream: Any) -> dict[str, Any]:
    """Rebuild the assistant message from chunks, the way agent loops do."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text.append(delta.content or "")
        for tc in delta.tool_calls or []:
            slot = calls.setdefault(
                tc.index,
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
            )
            slot["id"] = tc.id or slot["id"]
            if tc.function is not None:
                slot["function"]["name"] += tc.function.name or ""
                slot["function"]["arguments"] += tc.function.arguments or ""
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    return msg


def test_streamed_reply_echo_takes_the_fast_path(
    client: openai.OpenAI, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(
        reply("let me look", tool_calls=[tool_call("ls", {"path": "/tmp"})]),
        reply("here it is", chunks=5),
        reply("bye"),
    )
    messages: list[Any] = [user("what is in /tmp?")]
    kwargs = {"model": MODEL, "stream": True, **sid_headers("st")}
    msg = _accumulate(client.chat.completions.create(messages=messages, **kwargs))
    call_id = msg["tool_calls"][0]["id"]
    messages += [msg, {"role": "tool", "tool_call_id": call_id, "content": "a.txt b.txt"}]
    msg = _accumulate(client.chat.completions.create(messages=messages, **kwargs))
    assert msg == {"role": "assistant", "content": "here it is"}
    messages += [msg, user("thanks")]
    client.chat.completions.create(messages=messages, **kwargs).close()
    view = settled(http, "st", 6)
    assert view["superseded_count"] == 0
