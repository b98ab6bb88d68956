"""Issue #3, recovery end to end: ``read_tool_output`` is offered upstream only when it can
work, the proxy answers the model's calls to it from the session's store and asks the provider
again (non-streaming and streaming), and the client never sees any of it."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.replies import raw, reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.transcripts import api, blob, marker_args, page_slice, sdk, wait_event

MAX_CHARS = 2000
CLIENT_TOOLS = [
    {
        "type": "function",
        "function": {"name": "run_tests", "parameters": {"type": "object", "properties": {}}},
    }
]


def history(cid: str, output: str, *, tag: str = "log") -> list[dict[str, Any]]:
    call = tool_call("read_file", {"path": f"{tag}.txt"}, id=cid)
    return [
        {"role": "user", "content": f"look at {tag}"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": cid, "content": output},
    ]


def read_call(call_id: str = "int_1", **args: Any) -> dict[str, Any]:
    return tool_call("read_tool_output", args, id=call_id)


def context(persist_raw: bool = True) -> dict[str, Any]:
    return {
        "toolOutput": {"maxChars": MAX_CHARS, "persistRaw": persist_raw},
        "eviction": {"enabled": False},
        "summarize": {"enabled": False},
    }


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    """This module's config, under the name the shared ``settings``/``proxy`` fixtures read."""
    return write_config(tmp_path / "agents.json", fake_upstream.url, context=context())


def chat(proxy: ProxyServer, sid: str, messages: list[Any], **kw: Any) -> Any:
    key = kw.pop("key", "sk-test-client")
    return sdk(proxy, sid, key).chat.completions.create(model="gpt-4o", messages=messages, **kw)


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


def assert_valid_history(messages: Sequence[dict[str, Any]]) -> None:
    """Every tool call is answered right after its assistant message, and nothing else is."""
    i = 0
    while i < len(messages):
        ids = [c["id"] for c in messages[i].get("tool_calls") or []]
        results = []
        j = i + 1
        while j < len(messages) and messages[j]["role"] == "tool":
            results.append(messages[j]["tool_call_id"])
            j += 1
        assert sorted(results) == sorted(ids), (i, ids, results)
        i = j


def page_of(proxy: ProxyServer, sid: str, cid: str, **params: Any) -> str:
    with api(proxy) as http:
        r = http.get(f"/v1/sessions/{sid}/tool-outputs/{cid}", params=params)
    assert r.status_code == 200, r.text
    return str(r.json()["page"])


def test_offered_only_when_the_prompt_holds_a_handle(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    chat(proxy, "short", history("call_s", "tiny output"), tools=CLIENT_TOOLS)
    assert tool_names(fake_upstream.bodies()[-1]) == ["run_tests"]
    chat(proxy, "big", history("call_b", blob(9000, "b")), tools=CLIENT_TOOLS)
    assert tool_names(fake_upstream.bodies()[-1]) == ["run_tests", "read_tool_output"]
    chat(proxy, "big-no-tools", history("call_b", blob(9000, "c")))
    assert tool_names(fake_upstream.bodies()[-1]) == ["read_tool_output"]


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_internal_call_is_answered_from_the_store_and_hidden_from_the_client(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    original = blob(9000, "big")
    messages = history("call_big", original)
    fake_upstream.script(
        reply("let me look", tool_calls=[read_call(id="call_big", offset=1500, limit=1200)]),
        reply("the answer"),
    )
    out = chat(proxy, "s1", messages, stream=stream)
    if stream:
        chunks = list(out)
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert text == "let me lookthe answer" and finish[-1] == "stop"
    else:
        # Like the stream: every round's text, none of the internal calls.
        assert out.choices[0].message.content == "let me lookthe answer"
        assert out.choices[0].message.tool_calls is None
        assert out.choices[0].finish_reason == "stop"

    first, second = fake_upstream.bodies()
    internal = second["messages"][len(first["messages"]) :]
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert [m["role"] for m in internal] == ["assistant", "tool"]
    assert internal[0]["tool_calls"][0]["function"]["name"] == "read_tool_output"
    assert internal[1]["tool_call_id"] == "int_1"
    page = internal[1]["content"]
    assert page_slice(page) == (1500, 2700, 9000, original[1500:2700])
    assert page == page_of(proxy, "s1", "call_big", offset=1500, limit=1200)
    assert "read_tool_output" in tool_names(second)

    # The internal exchange is not part of the session: the next turn is a clean history.
    answer = {"role": "assistant", "content": "let me lookthe answer" if stream else "the answer"}
    chat(proxy, "s1", [*messages, answer, {"role": "user", "content": "thanks"}])
    third = fake_upstream.bodies()[-1]["messages"]
    assert len(third) == len(messages) + 2
    assert_valid_history(third)
    assert "int_1" not in json.dumps(third)


def test_grep_pages_match_the_tool_outputs_api(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(
        reply(None, tool_calls=[read_call(id="call_big", grep="BIG:0004")]), reply("ok")
    )
    chat(proxy, "s1", history("call_big", blob(9000, "big")))
    page = fake_upstream.bodies()[-1]["messages"][-1]["content"]
    assert "10 matching lines" in page and "big:00045" in page
    assert page == page_of(proxy, "s1", "call_big", grep="BIG:0004")


def test_another_sessions_or_tenants_output_is_not_found(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    chat(proxy, "s1", history("call_secret", blob(9000, "owner")))
    cases = [("sk-test-client", "s2"), ("sk-other-tenant", "s1")]
    for key, sid in cases:
        fake_upstream.script(
            reply(None, tool_calls=[read_call(id="call_secret")]), reply("nothing there")
        )
        own = history("call_own", blob(9000, f"{key}-{sid}"))  # a handle, so it is offered
        out = chat(proxy, sid, own, key=key, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in out if c.choices) == (
            "nothing there"
        )
        answer = fake_upstream.bodies()[-1]["messages"][-1]
        assert answer["tool_call_id"] == "int_1"
        assert answer["content"] == (
            "read_tool_output: no stored output with id 'call_secret' in this session"
        )
        with api(proxy, key) as http:
            assert http.get(f"/v1/sessions/{sid}/tool-outputs/call_secret").status_code == 404


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_mixed_step_gives_the_client_only_its_own_call(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    messages = history("call_big", blob(9000, "big"))
    client_call = tool_call("run_tests", {}, id="call_tests")
    fake_upstream.script(
        reply(None, tool_calls=[read_call(id="call_big", limit=100), client_call]),
        reply("all green"),
    )
    out = chat(proxy, "s1", messages, tools=CLIENT_TOOLS, stream=stream)
    if stream:
        calls: dict[int, dict[str, Any]] = {}
        for chunk in out:
            for d in (chunk.choices and chunk.choices[0].delta.tool_calls) or []:
                slot = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = d.id or slot["id"]
                slot["name"] += (d.function and d.function.name) or ""
                slot["arguments"] += (d.function and d.function.arguments) or ""
        assert list(calls) == [0]
        got = [tool_call(calls[0]["name"], calls[0]["arguments"], id=calls[0]["id"])]
    else:
        assert out.choices[0].finish_reason == "tool_calls"
        got = [c.model_dump(exclude_none=True) for c in out.choices[0].message.tool_calls]
    assert [(c["id"], c["function"]["name"]) for c in got] == [("call_tests", "run_tests")]
    assert len(fake_upstream.bodies()) == 1

    assistant = {"role": "assistant", "content": None, "tool_calls": got}
    result = {"role": "tool", "tool_call_id": "call_tests", "content": "12 passed"}
    chat(proxy, "s1", [*messages, assistant, result], tools=CLIENT_TOOLS)
    sent = fake_upstream.bodies()[-1]["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == "call_tests" and len(sent[-2]["tool_calls"]) == 1
    assert_valid_history(sent)


def test_persist_raw_toggle_takes_effect_on_the_next_request(
    proxy: ProxyServer, fake_upstream: FakeUpstream, config_path: Path
) -> None:
    messages = history("call_1", blob(9000, "one"))
    chat(proxy, "s1", messages)
    assert tool_names(fake_upstream.bodies()[-1]) == ["read_tool_output"]

    # Subscribe (the replayed first event proves it), then rewrite the file.
    headers = {"Last-Event-ID": "0"}
    with api(proxy) as http, http.stream("GET", "/v1/sessions/s1/events", headers=headers) as r:
        lines = r.iter_lines()
        next(line for line in lines if line.startswith("event:"))
        write_config(config_path, fake_upstream.url, context=context(persist_raw=False))
        assert next(line for line in lines if "config." in line) == "event: config.reloaded"

    more = [*messages, *history("call_2", blob(9000, "two"), tag="other")]
    chat(proxy, "s1", [*more[:3], {"role": "assistant", "content": "ok"}, *more[3:]])
    body = fake_upstream.bodies()[-1]
    assert "tools" not in body
    new_marker = body["messages"][-1]["content"]
    assert marker_args(new_marker) is None and "re-run the tool" in new_marker
    with api(proxy) as http:
        assert http.get("/v1/sessions/s1/tool-outputs/call_2").status_code == 404
        assert http.get("/v1/sessions/s1/tool-outputs/call_1").status_code == 200
        event = wait_event(http, "s1", "context.truncated", lambda d: d["tool_call_id"] == "call_2")
    assert event["spilled"] is False


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
    body = {"model": "gpt-4o", "stream": True, "messages": history("call_slow", blob(9000, "slow"))}
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


def test_with_two_choices_an_internal_call_in_one_hides_no_call_of_the_other(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # Both choices number their calls from 0: choice 0's read_tool_output at index 0 used
    # to hide choice 1's own call at index 0.
    def call(cid: str, name: str) -> dict[str, Any]:
        return {
            "index": 0,
            "id": cid,
            "type": "function",
            "function": {"name": name, "arguments": "{}"},
        }

    def frame(choices: list[dict[str, Any]]) -> str:
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": choices,
        }
        return f"data: {json.dumps(chunk)}\n\n"

    fake_upstream.script(
        raw(
            frame(
                [
                    {
                        "index": 0,
                        "delta": {
                            "role": "assistant",
                            "tool_calls": [call("int_1", "read_tool_output")],
                        },
                    },
                    {
                        "index": 1,
                        "delta": {"role": "assistant", "tool_calls": [call("call_w", "run_tests")]},
                    },
                ]
            ),
            frame(
                [
                    {"index": 0, "delta": {}, "finish_reason": "tool_calls"},
                    {"index": 1, "delta": {}, "finish_reason": "tool_calls"},
                ]
            ),
            "data: [DONE]\n\n",
        )
    )
    chunks = list(
        chat(
            proxy,
            "two",
            history("call_two", blob(9000, "two")),
            n=2,
            tools=CLIENT_TOOLS,
            stream=True,
        )
    )
    calls = [
        (c.index, t.function.name if t.function else None)
        for ch in chunks
        for c in ch.choices
        for t in c.delta.tool_calls or []
    ]
    assert calls == [(1, "run_tests")]
    finishes = {c.index: c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason}
    assert finishes[1] == "tool_calls"


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
    with client.chat.completions.stream(model="gpt-4o", messages=messages) as stream:
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
    body = {"model": "gpt-4o", "stream": True, "messages": history("call_big", blob(9000, "big"))}
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
    body = {"model": "gpt-4o", "stream": True, "messages": messages}
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
