"""Issue #3, redaction end to end: configured patterns and the built-in ones run on the full text
of every incoming message before anything is cut, stored, spilled or forwarded, so a secret
reaches no path: upstream requests, the messages API, the tool-outputs API, or events. A
redacted tool result is never spilled, not at ingestion and not at eviction, and its marker or
placeholder advertises no handle."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.settings import Settings
from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, replied, write_config
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS
from tests.integration.transcripts import api, blob, marker_args, replay_events, sdk, wait_event

MAX_CHARS = 2000
CONFIGURED = "ACME-12345678"  # matches the configured pattern only
BUILTIN = "ghp_" + "Z" * 36  # a GitHub token: matched by the default patterns


@pytest.fixture
def proxy(tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream) -> Iterator[ProxyServer]:
    context = {
        "toolOutput": {"maxChars": MAX_CHARS, "persistRaw": True},
        "redaction": {"enabled": True, "patterns": ["ACME-[0-9]{8}"]},
        "eviction": {
            "atFraction": 0.5,
            "keepRecentRounds": 1,
            "clearAtLeast": 300,
            "minResultTokens": 100,
        },
        "summarize": {"enabled": False},
    }
    models = {"default": {"contextLimit": 8000, "reservedOutput": 500}}
    path = write_config(tmp_path / "agents.json", fake_upstream.url, models=models, context=context)
    server = ProxyServer(Settings(database_url=db_dsn, config=path)).start()
    yield server
    server.stop()


def rounds(outputs: dict[str, str]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "investigate"}]
    for cid, output in outputs.items():
        call = tool_call("read_file", {"path": cid}, id=cid)
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": cid, "content": output})
    return messages


def chat(proxy: ProxyServer, messages: list[dict[str, Any]], **kw: Any) -> Any:
    """One request with the agent's tools (``read_tool_output`` goes only beside them)."""
    client = sdk(proxy, "s1")
    return client.chat.completions.create(
        model="gpt-4o", messages=messages, tools=CLIENT_TOOLS, **kw
    )


def splice(text: str, at: int, secret: str) -> str:
    return text[:at] + secret + text[at + len(secret) :]


def assert_nowhere(proxy: ProxyServer, fake: FakeUpstream, *secrets: str) -> None:
    """No secret in any request the provider got, nor in anything the session API returns."""
    wire = b"".join(r.content for r in fake.requests)
    with api(proxy) as http:
        rows = http.get("/v1/sessions/s1/messages", params={"include_superseded": True}).text
        events = json.dumps(replay_events(http, "s1"))
    for secret in secrets:
        assert secret.encode() not in wire
        assert secret not in rows
        assert secret not in events


def test_secret_deep_inside_a_huge_output_is_redacted_and_never_spilled(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    output = splice(splice(blob(50_000, "huge"), 300, f" {BUILTIN} "), 25_000, CONFIGURED)
    chat(proxy, rounds({"call_big": output}))

    body = fake_upstream.bodies()[-1]
    content = body["messages"][-1]["content"]
    assert len(content) <= MAX_CHARS
    assert content[:301] == output[:301] and content[301:312] == "[REDACTED] "
    assert marker_args(content) is None and "contained secrets" in content
    assert [t["function"]["name"] for t in body["tools"]] == ["run_tests"]  # no handle: no tool
    with api(proxy) as http:
        assert http.get("/v1/sessions/s1/tool-outputs/call_big").status_code == 404
        replied(http, "s1")  # the output is the row before the reply, stored after its answer
        row = http.get("/v1/sessions/s1/messages").json()["data"][-2]
        assert row["redacted"] is True and row["message"]["content"] == content
        assert wait_event(http, "s1", "context.truncated")["spilled"] is False
    assert_nowhere(proxy, fake_upstream, BUILTIN, CONFIGURED)


def test_redaction_runs_before_the_cut_so_no_secret_is_split(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # Secrets every 16 chars around both cut points: whatever the exact head and tail lengths,
    # some secret straddles each cut, and cutting first would leave a fragment behind.
    output = blob(10_000, "dense")
    for at in [*range(900, 2000, 16), *range(8800, 9700, 16)]:
        output = splice(output, at, f"ACME-{at:08d}")
    chat(proxy, rounds({"call_dense": output}))
    content = fake_upstream.bodies()[-1]["messages"][-1]["content"]
    head, _, tail = content.partition("[... truncated")
    assert "[REDACTED]" in head and "[REDACTED]" in tail
    assert "ACME" not in content and "CME-" not in content
    assert_nowhere(proxy, fake_upstream, *(f"{at:08d}" for at in range(900, 9700, 16)))


def test_a_secret_split_across_text_parts_is_redacted_on_every_path(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """A tool that flushes its output in chunks, each a content part, may split a key between
    two parts: the parts are redacted as the one text a model reads, before the cut."""
    secret = "ghp_" + "Q7w" * 12
    first, second = blob(6000, "chunked") + f" {secret[:10]}", secret[10:] + " rest"
    parts = [{"type": "text", "text": first}, {"type": "text", "text": second}]
    chat(proxy, rounds({"call_parts": parts}))
    with api(proxy) as http:
        assert http.get("/v1/sessions/s1/tool-outputs/call_parts").status_code == 404
        replied(http, "s1")
        assert http.get("/v1/sessions/s1/messages").json()["data"][-2]["redacted"] is True
    assert_nowhere(proxy, fake_upstream, "ghp_", "Q7wQ7w")


def test_secret_in_a_user_message_is_redacted_on_every_path(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    messages = [{"role": "user", "content": f"deploy with {CONFIGURED} and {BUILTIN} please"}]
    chunks = list(chat(proxy, messages, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "ok"
    sent = fake_upstream.bodies()[-1]["messages"][0]["content"]
    assert sent == "deploy with [REDACTED] and [REDACTED] please"
    with api(proxy) as http:
        assert http.get("/v1/sessions/s1/messages").json()["data"][0]["redacted"] is True
    assert_nowhere(proxy, fake_upstream, BUILTIN, CONFIGURED)


def test_redacted_result_is_evicted_without_a_handle_and_never_spilled(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    outputs = {f"call_{i}": blob(1900, f"r{i}") for i in range(10)}
    outputs["call_3"] = splice(outputs["call_3"], 1000, CONFIGURED)
    messages = rounds(outputs)
    fake_upstream.script(
        reply(None, tool_calls=[tool_call("read_tool_output", {"id": "call_3"}, id="int")]),
        reply("done"),
    )
    # The first request is already over 50% of the window: eviction runs on it.
    assert chat(proxy, messages).choices[0].message.content == "done"

    first, second = fake_upstream.bodies()
    tools = {m["tool_call_id"]: m["content"] for m in first["messages"] if m["role"] == "tool"}
    index = {m.get("tool_call_id"): i for i, m in enumerate(first["messages"])}
    assert tools["call_3"].startswith("[context-cleared]")
    assert marker_args(tools["call_3"]) is None and "re-run the tool" in tools["call_3"]
    assert marker_args(tools["call_2"]) == {"id": f"call_2@{index['call_2']}"}
    assert tools["call_9"] == outputs["call_9"]  # the protected last round
    answer = second["messages"][-1]
    assert (
        answer["content"] == "read_tool_output: no stored output with id 'call_3' in this session"
    )
    with api(proxy) as http:
        assert http.get("/v1/sessions/s1/tool-outputs/call_3").status_code == 404
        assert http.get("/v1/sessions/s1/tool-outputs/call_2").status_code == 200
    assert_nowhere(proxy, fake_upstream, CONFIGURED)
