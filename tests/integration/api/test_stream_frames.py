"""A real proxy relaying the exact frames of providers that stray from OpenAI's framing, read
by the openai SDK's stream helper: parallel calls sent every id first with a
``read_tool_output`` among them, and a stream whose lines end in ``\\r`` alone."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.fakes.replies import Pacer, raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS, history
from tests.integration.api.test_read_tool_output_answers import (
    config_path,  # noqa: F401  (the module's config: maxChars 2000, raw outputs kept)
)
from tests.integration.transcripts import api, blob, sdk

HEAD = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}


def frame(delta: dict[str, Any], finish: str | None = None, *, end: str = "\n") -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return f"data: {json.dumps({**HEAD, 'choices': [choice]})}{end}{end}"


def _call(index: int, **fields: Any) -> str:
    return frame({"tool_calls": [{"index": index, **fields}]})


def test_parallel_calls_sent_id_first_keep_the_internal_ones_id_from_the_sdk(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # Every call's id, then every name, then the arguments: call 0's id must not go out as a
    # client call's the moment call 1's id comes, before its name says it is the proxy's.
    # The SDK's helper fails on a call fragment with no "function" (an id alone): the relay,
    # which holds such a fragment anyway, sends it merged with the name after it.
    args = json.dumps({"handle": "call_big", "offset": 0})
    frames = [
        frame({"role": "assistant", "content": None}),
        _call(0, id="int_1", type="function"),
        _call(1, id="call_c", type="function"),
        _call(0, function={"name": "read_tool_output", "arguments": ""}),
        _call(1, function={"name": "run_tests", "arguments": ""}),
        _call(0, function={"arguments": args}),
        _call(1, function={"arguments": "{}"}),
        frame({}, "tool_calls"),
        "data: [DONE]\n\n",
    ]
    fake_upstream.script(raw(*frames), reply("unused"))
    messages = history("call_big", blob(9000, "big"))
    client = sdk(proxy, "id-first-parallel")
    with client.chat.completions.stream(
        model="gpt-4o", messages=messages, tools=CLIENT_TOOLS
    ) as stream:
        seen = [event.model_dump_json() for event in stream]
        final = stream.get_final_completion()
    assert not any("int_1" in event for event in seen)
    [call] = final.choices[0].message.tool_calls or []
    assert (call.id, call.function.name, call.function.arguments) == ("call_c", "run_tests", "{}")
    assert final.choices[0].finish_reason == "tool_calls"


def test_a_cr_only_stream_reaches_the_sdk_event_by_event(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # "\r" alone ends an SSE line: each event must reach the client before the provider sends
    # the next (the pacer lets frame i out only after the client saw frame i - 1), else the
    # body ends early and the answer is cut.
    words = ["one ", "two ", "three"]
    frames = [
        frame({"role": "assistant", "content": ""}, end="\r"),
        *(frame({"content": w}, end="\r") for w in words),
        frame({}, "stop", end="\r"),
        "data: [DONE]\r\r",
    ]
    pacer = Pacer(patience=5)
    fake_upstream.script(raw(*frames, pacer=pacer))
    client = sdk(proxy, "cr-only")
    text = []
    with client.chat.completions.stream(
        model="gpt-4o", messages=[{"role": "user", "content": "go"}]
    ) as stream:
        for event in stream:
            if event.type == "content.delta":
                text.append(event.delta)
            if event.type == "chunk":  # one per frame: the provider may send the next
                pacer.allow()
        final = stream.get_final_completion()
    pacer.allow(len(frames))
    assert not pacer.expired
    assert "".join(text) == "one two three"
    assert final.choices[0].message.content == "one two three"
    assert final.choices[0].finish_reason == "stop"
    with api(proxy) as http:
        for _ in range(100):  # stored just after the response
            rows = http.get("/v1/sessions/cr-only/messages").json()["data"]
            if len(rows) > 1:
                break
            time.sleep(0.02)
    assert rows[-1]["message"] == {"role": "assistant", "content": "one two three"}


def test_a_request_for_several_choices_gets_no_read_tool_output(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # The proxy answers read_tool_output for one reply (choice 0's) and continues one stream;
    # with n=2, a call in choice 1 ended the round silently and sent choice 0 upstream again
    # as if it had called the tool: its text reached the client twice, in two rounds.
    def choice(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"index": index, "delta": delta, "finish_reason": finish}

    args = json.dumps({"id": "call_big", "offset": 0})
    call = {"index": 0, "id": "int_1", "type": "function"}
    call["function"] = {"name": "read_tool_output", "arguments": args}
    deltas = [
        [choice(0, {"role": "assistant", "content": "all "}), choice(1, {"role": "assistant"})],
        [choice(0, {"content": "done"}), choice(1, {"tool_calls": [call]})],
        [choice(0, {}, "stop"), choice(1, {}, "tool_calls")],
    ]
    frames = [f"data: {json.dumps({**HEAD, 'choices': c})}\n\n" for c in deltas]
    fake_upstream.script(raw(*frames, "data: [DONE]\n\n"), reply("again"))
    client = sdk(proxy, "two-choices")
    messages = history("call_big", blob(9000, "big"))
    with client.chat.completions.stream(
        model="gpt-4o", messages=messages, tools=CLIENT_TOOLS, n=2
    ) as stream:
        final = stream.get_final_completion()
    [sent] = fake_upstream.bodies()
    assert [t["function"]["name"] for t in sent["tools"]] == ["run_tests"]
    assert "read_tool_output" not in json.dumps(sent["messages"])  # no handle named either
    assert final.choices[0].message.content == "all done"
    assert [c.finish_reason for c in final.choices] == ["stop", "tool_calls"]
