"""Issue #3, the internal rounds of ``read_tool_output``: a model that keeps reading is cut
off, occupancy is the assembled prompt's, a stream stays alive while a later round waits, and
the rounds reach the client as one completion (one id, one role frame), or as an error that
stores nothing when a later round breaks off. (With n > 1 nothing is offered:
test_stream_frames.py; the relay's calls per choice: tests/unit/test_relay_frames.py.)"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.fakes.replies import raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.read_tool_output_helpers import (
    CLIENT_TOOLS,
    assert_valid_history,
    chat,
    history,
    read_call,
)
from tests.integration.api.test_read_tool_output_answers import (
    config_path,  # noqa: F401  (the module's config: maxChars 2000, raw outputs kept)
)
from tests.integration.transcripts import api, blob, sdk


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_a_model_that_keeps_reading_is_cut_off_without_leaking_the_call(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    rounds = proxy.settings.max_internal_rounds + 1
    fake_upstream.script(
        *(reply(f"r{n} ", tool_calls=[read_call(f"int_{n}", id="call_big")]) for n in range(9))
    )
    messages = history("call_big", blob(9000, "big"))
    if stream:
        options = {"include_usage": True}
        chunks = list(chat(proxy, "s1", messages, stream=True, stream_options=options))
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens > 0
    else:
        out = chat(proxy, "s1", messages)
        message = out.choices[0].message
        assert message.tool_calls is None
        text, finish = message.content, [out.choices[0].finish_reason]
    assert finish[-1] == "stop"
    assert len(fake_upstream.bodies()) == rounds
    assert text.endswith(f"r{rounds - 1} ")

    # The turn ended cleanly: the client's next request is a valid history.
    answer = {"role": "assistant", "content": text}
    chat(proxy, "s1", [*messages, answer, {"role": "user", "content": "and now?"}])
    assert_valid_history(fake_upstream.bodies()[-1]["messages"])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_occupancy_is_the_assembled_prompts_not_the_internal_rounds(
    stream: bool, proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # The step's estimate is of the prompt it assembled: the provider's count for that same
    # prompt is round 0's; the internal round's prompt also holds the page read back.
    fake_upstream.script(
        reply(None, tool_calls=[read_call(id="call_big", offset=0)], usage=(1234, 5)),
        reply("done", usage=(9876, 5)),
    )
    kw: dict[str, Any] = {"stream": True} if stream else {}
    answer = chat(proxy, "occ", history("call_big", blob(9000, "big")), **kw)
    if stream:
        list(answer)
    with api(proxy) as http:
        for _ in range(100):  # stored just after the response
            shown = http.get("/v1/sessions/occ").json()
            if shown.get("last_prompt_tokens") is not None:
                break
            time.sleep(0.02)
    assert len(fake_upstream.requests) == 2
    assert shown["last_prompt_tokens"] == 1234


def test_a_stream_keeps_the_client_connection_alive_while_a_later_round_waits(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # keepalive_seconds is 0.3: the second round's provider is silent for 1.2 s.
    fake_upstream.script(
        reply("let me look", tool_calls=[read_call(id="call_slow", offset=0, limit=500)]),
        reply("found it", first_byte_delay=1.2),
    )
    body = {
        "model": "gpt-4o",
        "stream": True,
        "tools": CLIENT_TOOLS,
        "messages": history("call_slow", blob(9000, "slow")),
    }
    lines: list[tuple[float, str]] = []
    with (
        api(proxy) as http,
        http.stream(
            "POST", "/v1/chat/completions", json=body, headers={"X-Session-Id": "slow-round"}
        ) as resp,
    ):
        started = time.monotonic()
        for line in resp.iter_lines():
            lines.append((time.monotonic() - started, line))
    comments = [t for t, line in lines if line.startswith(":")]
    text = "".join(
        json.loads(line[5:])["choices"][0]["delta"].get("content") or ""
        for _, line in lines
        if line.startswith("data: {")
    )
    assert text == "let me lookfound it"
    assert len(comments) >= 2  # one per keep-alive interval of the wait, not silence
    gaps = [b - a for (a, _), (b, _) in zip(lines, lines[1:], strict=False)]
    assert max(gaps) < 0.9


def _three_rounds(fake_upstream: FakeUpstream) -> None:
    """Two internal rounds, then an answer that calls itself another completion: another id,
    time, model and fingerprint, and a role frame of its own."""
    later = {
        "id": "chatcmpl-other",
        "object": "chat.completion.chunk",
        "created": 1_800_000_000,
        "model": "other-model",
        "system_fingerprint": "fp_other",
    }

    def frame(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return f"data: {json.dumps({**later, 'choices': [choice]})}\n\n"

    fake_upstream.script(
        reply("let me look ", tool_calls=[read_call("int_1", id="call_big", offset=0)]),
        reply("and more ", tool_calls=[read_call("int_2", id="call_big", offset=500)]),
        raw(
            frame({"role": "assistant", "content": ""}),
            frame({"content": "the "}),
            frame({"content": "answer"}),
            frame({}, "stop"),
            "data: [DONE]\n\n",
        ),
    )


def test_internal_rounds_make_one_stream_for_the_sdk_stream_helper(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # Each round's role frame used to reach the client: the helper built "assistantassistant".
    _three_rounds(fake_upstream)
    messages = history("call_big", blob(9000, "big"))
    client = sdk(proxy, "one-stream")
    with client.chat.completions.stream(
        model="gpt-4o", messages=messages, tools=CLIENT_TOOLS
    ) as stream:
        final = stream.get_final_completion()
    assert len(fake_upstream.bodies()) == 3
    message = final.choices[0].message
    assert message.role == "assistant"
    assert message.content == "let me look and more the answer"
    assert message.tool_calls is None and final.choices[0].finish_reason == "stop"
    assert (final.id, final.model, final.created) == ("chatcmpl-fake-0", "gpt-4o", 1_700_000_000)
    assert final.system_fingerprint == "fp_fake"

    # What the proxy stored is the same one message, and the client's resend of it matches.
    with api(proxy) as http:
        for _ in range(100):
            rows = http.get("/v1/sessions/one-stream/messages").json()["data"]
            if len(rows) > len(messages):
                break
            time.sleep(0.02)
    assert rows[-1]["message"] == {
        "role": "assistant",
        "content": "let me look and more the answer",
    }
    resent = {"role": message.role, "content": message.content}
    chat(proxy, "one-stream", [*messages, resent, {"role": "user", "content": "thanks"}])
    sent = fake_upstream.bodies()[-1]["messages"]
    assert sent[-2] == resent and len(sent) == len(messages) + 2


def test_internal_rounds_send_one_id_one_role_and_one_identity_on_the_wire(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    _three_rounds(fake_upstream)
    body = {
        "model": "gpt-4o",
        "stream": True,
        "tools": CLIENT_TOOLS,
        "messages": history("call_big", blob(9000, "big")),
    }
    with api(proxy) as http:
        resp = http.post("/v1/chat/completions", json=body, headers={"X-Session-Id": "wire"})
    frames = [line[6:] for line in resp.text.splitlines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(f) for f in frames[:-1]]
    for key in ("id", "created", "model", "system_fingerprint"):
        assert {c.get(key) for c in chunks} == {chunks[0][key]}, key
    assert chunks[0]["id"] == "chatcmpl-fake-0"
    deltas = [ch["delta"] for c in chunks for ch in c["choices"]]
    assert [d["role"] for d in deltas if "role" in d] == ["assistant"]
    assert {ch["index"] for c in chunks for ch in c["choices"]} == {0}
    assert "".join(d.get("content") or "" for d in deltas) == "let me look and more the answer"
    finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    assert finishes == ["stop"]


def test_a_later_round_that_ends_early_is_an_error_and_stores_nothing(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # Issue 21 item 2, past an internal round: no finish reason, no [DONE], a clean close.
    head = {"id": "c2", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    early = [
        f"data: {json.dumps({**head, 'choices': [{'index': 0, 'delta': d}]})}\n\n"
        for d in ({"role": "assistant", "content": ""}, {"content": "half an ans"})
    ]
    fake_upstream.script(
        reply("let me look ", tool_calls=[read_call(id="call_big", offset=0)]),
        raw(*early),
        reply("whole"),
    )
    messages = history("call_big", blob(9000, "big"))
    body = {"model": "gpt-4o", "stream": True, "tools": CLIENT_TOOLS, "messages": messages}
    with api(proxy) as http:
        resp = http.post("/v1/chat/completions", json=body, headers={"X-Session-Id": "early"})
        frames = [line[6:] for line in resp.text.splitlines() if line.startswith("data: ")]
        assert "broke off" not in frames[-2] and "error" in json.loads(frames[-2])
        assert frames[-1] == "[DONE]"
        text = "".join(
            json.loads(f)["choices"][0]["delta"].get("content") or "" for f in frames[:-2]
        )
        assert text == "let me look half an ans"
        rows = http.get("/v1/sessions/early/messages").json()["data"]
        assert [r["message"]["role"] for r in rows] == ["user", "assistant", "tool"]
    out = chat(proxy, "early", messages)
    assert out.choices[0].message.content == "whole"


def test_an_internal_call_sent_id_first_never_reaches_the_sdk(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # Some providers send a call's id and type in a fragment before its name: the relay holds
    # that fragment until the name says the call is read_tool_output, then drops it.
    call = read_call("int_1", id="call_big", offset=0)
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
    deltas: list[tuple[dict[str, Any], str | None]] = [
        ({"role": "assistant", "content": None}, None),
        ({"tool_calls": [{"index": 0, "id": call["id"], "type": "function"}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"name": "read_tool_output"}}]}, None),
        (
            {
                "tool_calls": [
                    {"index": 0, "function": {"arguments": call["function"]["arguments"]}}
                ]
            },
            None,
        ),
        ({}, "tool_calls"),
    ]
    choices = [[{"index": 0, "delta": d, "finish_reason": f}] for d, f in deltas]
    first = [f"data: {json.dumps({**head, 'choices': c})}\n\n" for c in choices]
    fake_upstream.script(raw(*first, "data: [DONE]\n\n"), reply("the answer"))
    client = sdk(proxy, "id-first")
    with client.chat.completions.stream(
        model="gpt-4o", messages=history("call_big", blob(9000, "big")), tools=CLIENT_TOOLS
    ) as stream:
        final = stream.get_final_completion()
    assert len(fake_upstream.bodies()) == 2
    message = final.choices[0].message
    assert message.content == "the answer" and message.tool_calls is None


@pytest.mark.parametrize("internal_at", [0, 1], ids=["internal-first", "client-first"])
def test_parallel_calls_with_arguments_before_names_hide_the_internal_one(
    proxy: ProxyServer, fake_upstream: FakeUpstream, internal_at: int
) -> None:
    # Interleaved parallel calls, each one's first arguments before its name: no fragment of
    # the proxy's own call reaches the client, which gets its call whole, numbered 0.
    names = ["run_tests", "run_tests"]
    names[internal_at] = "read_tool_output"
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
    calls = [
        {"index": 0, "id": "call_0", "type": "function", "function": {"arguments": '{"of'}},
        {"index": 1, "id": "call_1", "type": "function", "function": {"arguments": '{"of'}},
        {"index": 1, "function": {"name": names[1]}},
        {"index": 0, "function": {"name": names[0]}},
        {"index": 0, "function": {"arguments": 'fset": 0}'}},
        {"index": 1, "function": {"arguments": 'fset": 0}'}},
    ]
    deltas = [{"role": "assistant", "content": None}] + [{"tool_calls": [c]} for c in calls]
    frames = [{"index": 0, "delta": d, "finish_reason": None} for d in deltas]
    frames.append({"index": 0, "delta": {}, "finish_reason": "tool_calls"})
    wire = [f"data: {json.dumps({**head, 'choices': [f]})}\n\n" for f in frames]
    fake_upstream.script(raw(*wire, "data: [DONE]\n\n"))
    body = {"model": "gpt-4o", "stream": True, "tools": CLIENT_TOOLS}
    body["messages"] = history("call_big", blob(9000, "big"))
    with api(proxy) as http:
        resp = http.post("/v1/chat/completions", json=body, headers={"X-Session-Id": "mixed"})
    assert "read_tool_output" not in resp.text and f"call_{internal_at}" not in resp.text
    sent = [json.loads(line[6:]) for line in resp.text.splitlines() if line[6:7] == "{"]
    fragments = [c for f in sent for c in f["choices"][0]["delta"].get("tool_calls") or []]
    assert [c["index"] for c in fragments] == [0] * len(fragments)
    assert fragments[0]["id"] == f"call_{1 - internal_at}"
    assert fragments[0]["function"]["name"] == "run_tests"
    assert "".join(c["function"].get("arguments", "") for c in fragments) == '{"offset": 0}'


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_malformed_tool_calls_with_read_tool_output_offered_are_a_provider_error(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    # Where the proxy reads the calls to find its own: a 502, or an error frame, never a 500.
    message = {"role": "assistant", "content": None, "tool_calls": "read_tool_output"}
    if stream:
        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        choice = {"index": 0, "delta": message, "finish_reason": "tool_calls"}
        answer = raw(f"data: {json.dumps({**chunk, 'choices': [choice]})}\n\n", "data: [DONE]\n\n")
    else:
        whole = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m"}
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        body = json.dumps({**whole, "choices": [choice]})
        answer = raw(body, headers={"content-type": "application/json"})
    fake_upstream.script(answer)
    body = {"model": "gpt-4o", "stream": stream, "tools": CLIENT_TOOLS}
    body["messages"] = history("call_big", blob(9000, "big"))
    with api(proxy) as http:
        resp = http.post("/v1/chat/completions", json=body, headers={"X-Session-Id": "bad"})
    if stream:
        frames = [line[6:] for line in resp.text.splitlines() if line.startswith("data: ")]
        assert frames[-1] == "[DONE]" and "malformed" in json.loads(frames[-2])["error"]["message"]
    else:
        assert resp.status_code == 502 and "malformed" in resp.json()["error"]["message"]
    assert len(fake_upstream.bodies()) == 1


def test_a_provider_that_ignores_stream_has_its_read_tool_output_call_answered(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # Each round's answer a whole completion: its read_tool_output call is the proxy's, as a
    # streamed one is, and the client's stream holds only the last round's answer.
    def whole(message: dict[str, Any], finish: str) -> Any:
        choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        body = {"id": "c1", "object": "chat.completion", "created": 1, "choices": [choice]}
        return raw(json.dumps(body), headers={"content-type": "application/json"})

    call = read_call("int_1", id="call_big")
    fake_upstream.script(
        whole({"content": None, "tool_calls": [call]}, "tool_calls"),
        whole({"content": "the answer"}, "stop"),
    )
    messages = history("call_big", blob(9000, "big"))
    client = sdk(proxy, "ignores-stream")
    with client.chat.completions.stream(
        model="gpt-4o", messages=messages, tools=CLIENT_TOOLS
    ) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert (message.content, message.tool_calls) == ("the answer", None)
    bodies = fake_upstream.bodies()
    assert len(bodies) == 2
    answered = bodies[1]["messages"][-1]
    assert answered["role"] == "tool" and answered["tool_call_id"] == "int_1", answered
    assert answered["content"].startswith("[read_tool_output"), answered["content"][:200]
