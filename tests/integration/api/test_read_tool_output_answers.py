"""Issue #3, recovery end to end: ``read_tool_output`` is offered upstream only when it can
work, the proxy answers the model's calls to it from the session's store (the same pages as the
tool-outputs API, only the session's own) and asks the provider again (non-streaming and
streaming), and the client never sees any of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import (
    CLIENT_TOOLS,
    assert_valid_history,
    chat,
    context,
    history,
    read_call,
)
from tests.integration.transcripts import api, blob, marker_args, page_slice, wait_event


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    """This module's config, under the name the shared ``settings``/``proxy`` fixtures read."""
    return write_config(tmp_path / "agents.json", fake_upstream.url, context=context())


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


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
    chat(proxy, "big-no-tools", history("call_b", blob(9000, "c")), tools=None)
    assert "tools" not in fake_upstream.bodies()[-1]  # test_read_tool_output_toolless.py


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
    assert tool_names(fake_upstream.bodies()[-1]) == ["run_tests", "read_tool_output"]

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
    assert tool_names(body) == ["run_tests"]
    new_marker = body["messages"][-1]["content"]
    assert marker_args(new_marker) is None and "re-run the tool" in new_marker
    with api(proxy) as http:
        assert http.get("/v1/sessions/s1/tool-outputs/call_2").status_code == 404
        assert http.get("/v1/sessions/s1/tool-outputs/call_1").status_code == 200
        event = wait_event(http, "s1", "context.truncated", lambda d: d["tool_call_id"] == "call_2")
    assert event["spilled"] is False
