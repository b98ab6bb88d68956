"""Request pass-through: the upstream sees exactly the client's body, minus proxy-only fields.

Issue #2 item 2. Fields the proxy does not know (vendor extensions, new OpenAI parameters,
extra keys inside messages and content parts) reach the provider untouched, on the first turn
and on later turns when the history comes back out of the session store. The only changes are
``metadata.session_id`` (removed; ``metadata`` dropped when that empties it) and, for streams,
``stream_options.include_usage`` (forced on so the proxy learns the real prompt size).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import httpx
import openai

from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }
]

# Fields a client might send that the proxy knows nothing about, at every level.
UNKNOWN_TOP_LEVEL: dict[str, Any] = {
    "temperature": 0.25,
    "top_p": 0.9,
    "seed": 9007199254740993,  # 2**53 + 1: must not go through a float
    "user": "user-123",
    "prompt_cache_key": "tenant-a:agent-7",  # the client's own cache routing, kept as sent
    "safety_identifier": "hashed-user-9",
    "store": True,
    "reasoning_effort": "low",
    "service_tier": "flex",
    "response_format": {"type": "json_object"},
    "top_k": 40,  # vLLM / OpenRouter extension
    "repetition_penalty": 1.1,
    "x_vendor": {"nested": [1, 2.5, None, True, "ünïcode ✓"], "empty": {}},
}

MESSAGES: list[dict[str, Any]] = [
    {
        "role": "system",
        "content": [
            {
                "type": "text",
                "text": "You are a careful engineer.",
                "cache_control": {"type": "ephemeral"},
            }
        ],
    },
    {
        "role": "user",
        "name": "alice",
        "content": [
            {"type": "text", "text": "Read the README please."},
            {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64,AAAA", "detail": "high"},
            },
        ],
        "x_message_extra": {"trace": [1, 2, 3]},
    },
]


def _wait_stored(http: httpx.Client, sid: str, n: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 3
    while True:
        rows = http.get(f"/v1/sessions/{sid}/messages").json().get("data") or []
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(0.02)


def test_unknown_fields_reach_upstream_untouched(
    client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    sent = {
        "model": "gpt-fake",
        "messages": copy.deepcopy(MESSAGES),
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "read_file"}},
        "parallel_tool_calls": False,
        "metadata": {"session_id": "pt-unknown", "trace_id": "abc"},
    }

    raw = client.chat.completions.with_raw_response.create(
        **{k: v for k, v in sent.items() if k not in ("tool_choice",)},
        tool_choice=sent["tool_choice"],
        temperature=UNKNOWN_TOP_LEVEL["temperature"],
        top_p=UNKNOWN_TOP_LEVEL["top_p"],
        seed=UNKNOWN_TOP_LEVEL["seed"],
        user=UNKNOWN_TOP_LEVEL["user"],
        store=UNKNOWN_TOP_LEVEL["store"],
        reasoning_effort=UNKNOWN_TOP_LEVEL["reasoning_effort"],
        service_tier=UNKNOWN_TOP_LEVEL["service_tier"],
        response_format=UNKNOWN_TOP_LEVEL["response_format"],
        extra_body={
            k: UNKNOWN_TOP_LEVEL[k]
            for k in (
                "top_k",
                "repetition_penalty",
                "x_vendor",
                "prompt_cache_key",
                "safety_identifier",
            )
        },
    )

    assert raw.headers["x-session-id"] == "pt-unknown"
    expected = {**sent, **UNKNOWN_TOP_LEVEL, "metadata": {"trace_id": "abc"}}
    assert fake_upstream.bodies()[-1] == expected
    assert sent["messages"] == MESSAGES  # the SDK sent what we meant


def test_metadata_with_only_session_id_is_dropped(
    client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-fake",
        messages=[{"role": "user", "content": "hi"}],
        metadata={"session_id": "pt-only-sid"},
    )

    assert raw.headers["x-session-id"] == "pt-only-sid"
    assert fake_upstream.bodies()[-1] == {
        "model": "gpt-fake",
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_session_header_is_not_forwarded(http: httpx.Client, fake_upstream: FakeUpstream) -> None:
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}

    resp = http.post("/v1/chat/completions", json=body, headers={"x-session-id": "pt-header"})

    assert resp.headers["x-session-id"] == "pt-header"
    assert fake_upstream.bodies()[-1] == body
    assert "x-session-id" not in fake_upstream.requests[-1].headers


def test_stream_only_adds_include_usage(http: httpx.Client, fake_upstream: FakeUpstream) -> None:
    body = {
        "model": "gpt-fake",
        "messages": copy.deepcopy(MESSAGES),
        "stream": True,
        "stream_options": {"include_obfuscation": False},
        "metadata": {"session_id": "pt-stream", "keep": "me"},
        **UNKNOWN_TOP_LEVEL,
    }

    resp = http.post("/v1/chat/completions", json=body)

    assert resp.status_code == 200
    assert fake_upstream.bodies()[-1] == {
        **body,
        "stream_options": {"include_obfuscation": False, "include_usage": True},
        "metadata": {"keep": "me"},
    }


def test_later_turns_resend_stored_history_untouched(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """Turn 2 comes out of the store: old messages keep every unknown field they had."""
    sid = "pt-history"
    headers = {"x-session-id": sid}
    fake_upstream.script(
        reply(
            "Reading it.",
            tool_calls=[tool_call("read_file", {"path": "README.md"}, id="call_readme")],
        ),
        reply("It says hello."),
    )
    turn1 = {"model": "gpt-fake", "messages": copy.deepcopy(MESSAGES), "tools": TOOLS}
    first = http.post("/v1/chat/completions", json=turn1, headers=headers)
    assistant = first.json()["choices"][0]["message"]  # exactly as the provider sent it
    _wait_stored(http, sid, len(MESSAGES) + 1)

    history = [
        *copy.deepcopy(MESSAGES),
        assistant,
        {
            "role": "tool",
            "tool_call_id": "call_readme",
            "content": "# Hello\nThis is the README.",
            "x_tool_meta": {"exit_code": 0, "duration_ms": 12.5},
        },
        {"role": "user", "content": "Summarise.", "x_message_extra": None},
    ]
    turn2 = {**turn1, "messages": history, "x_vendor": UNKNOWN_TOP_LEVEL["x_vendor"]}
    second = http.post("/v1/chat/completions", json=turn2, headers=headers)

    assert second.status_code == 200
    assert fake_upstream.bodies()[-1] == turn2
    rows = _wait_stored(http, sid, len(history) + 1)
    assert [r["message"] for r in rows[: len(history)]] == history


def test_an_integer_beyond_64_bits_reaches_upstream_exact(
    client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    """orjson reads such an integer as a float: a JSON schema's bound of 2**64 + 1 went
    upstream as ``1.8446744073709552e+19``, on a first request and on one the proxy parses only the
    new part of (a resent body, larger than the cache's minimum)."""
    bound = 2**64 + 1
    schema = {"type": "integer", "minimum": 0, "maximum": bound}
    response_format = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    turn = [{"role": "user", "content": "pick a number " + "x" * 9000}]
    headers = {"x-session-id": "pt-big-int"}

    client.chat.completions.create(
        model="gpt-fake", messages=turn, response_format=response_format, extra_headers=headers
    )
    more = [*turn, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "again"}]
    client.chat.completions.create(
        model="gpt-fake", messages=more, response_format=response_format, extra_headers=headers
    )

    for request in fake_upstream.requests[-2:]:
        assert request.json["response_format"]["json_schema"]["schema"]["maximum"] == bound
        assert b'"maximum":18446744073709551617' in request.content.replace(b" ", b"")
