"""Streaming chat through the real proxy: frames relayed untouched, one by one, as they come.

Issue #2 items 2 and 3. Byte-for-byte means: the ``data:`` frames the client gets through the
proxy equal the frames the upstream sends for the same request fetched directly with httpx
(with ``stream_options.include_usage``, which the proxy always asks for), minus the usage-only
frame when the client did not ask for usage. Keep-alive comments (``: keep-alive``) may be
interleaved; they are not data frames. The official SDK reassembles what the proxy relays.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.replies import Pacer, Reply, raw, reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import wait_for
from tests.integration.api.sse_frames import DONE, _data_frames, _payload

CLIENT_KEY = "sk-test-client"
KEEPALIVE = b": keep-alive"

TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("get_weather", "get_time")
]

CASES: dict[str, tuple[dict[str, Any], Reply]] = {
    "text": (
        {"model": "gpt-fake", "messages": [{"role": "user", "content": "Greet me warmly."}]},
        reply("Hello there, très chère — 你好!", id="chatcmpl-s-text", chunks=5),
    ),
    "parallel_tool_calls": (
        {
            "model": "gpt-fake",
            "messages": [{"role": "user", "content": "Weather and time in Oslo?"}],
            "tools": TOOLS,
        },
        reply(
            "Checking both.",
            tool_calls=[
                tool_call("get_weather", {"city": "Oslo", "unit": "C"}, id="call_w"),
                tool_call("get_time", {"city": "Oslo"}, id="call_t"),
            ],
            id="chatcmpl-s-tools",
        ),
    ),
    "content_parts": (
        {
            "model": "gpt-fake",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Describe:"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    ],
                }
            ],
        },
        reply("A grey square.", id="chatcmpl-s-parts"),
    ),
    "n_and_logprobs": (
        {
            "model": "gpt-fake",
            "messages": [{"role": "user", "content": "Pick a number."}],
            "n": 2,
            "logprobs": True,
            "top_logprobs": 1,
        },
        reply("Seven, I think.", id="chatcmpl-s-n2", chunks=3),
    ),
}


def _is_usage_only(frame: bytes) -> bool:
    if frame == DONE:
        return False
    obj = _payload(frame)
    return obj.get("choices") == [] and obj.get("usage") is not None


def _with_usage(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "stream": True, "stream_options": {"include_usage": True}}


def _direct_frames(fake: FakeUpstream, body: dict[str, Any]) -> list[bytes]:
    """Frames of the same request sent straight to the upstream, asking for usage."""
    resp = httpx.post(
        f"{fake.url}/chat/completions",
        json=_with_usage(body),
        headers={"authorization": f"Bearer {CLIENT_KEY}"},
        timeout=10,
    )
    assert resp.status_code == 200
    return _data_frames(resp.content)


def _timed_lines(http: httpx.Client, body: dict[str, Any]) -> tuple[float, list[tuple[float, str]]]:
    """(seconds until headers, [(seconds since request, line)]) for a streamed request."""
    start = time.monotonic()
    out: list[tuple[float, str]] = []
    with http.stream("POST", "/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        t_headers = time.monotonic() - start
        for line in resp.iter_lines():
            if line:
                out.append((time.monotonic() - start, line))
    return t_headers, out


# --------------------------------------------------------------------------- byte for byte


def test_stream_frames_identical_when_client_asks_for_usage(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    for case, (body, scripted) in CASES.items():
        fake_upstream.script(scripted, scripted)
        expected = _direct_frames(fake_upstream, body)

        resp = http.post("/v1/chat/completions", json=_with_usage(body))

        assert resp.status_code == 200, case
        assert resp.headers["content-type"].startswith("text/event-stream"), case
        assert _data_frames(resp.content) == expected, case
        assert _is_usage_only(expected[-2]), case  # the comparison covered the usage frame


def test_stream_frames_identical_minus_usage_frame_when_not_asked(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    for case, (body, scripted) in CASES.items():
        fake_upstream.script(scripted, scripted)
        expected = [f for f in _direct_frames(fake_upstream, body) if not _is_usage_only(f)]

        resp = http.post("/v1/chat/completions", json={**body, "stream": True})

        assert resp.status_code == 200, case
        assert _data_frames(resp.content) == expected, case
        # The proxy still asked the upstream for usage, to learn the real prompt size.
        assert fake_upstream.bodies()[-1]["stream_options"] == {"include_usage": True}, case


def test_client_include_usage_false_still_gets_no_usage_frame(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    body, scripted = CASES["text"]
    fake_upstream.script(scripted)

    resp = http.post(
        "/v1/chat/completions",
        json={**body, "stream": True, "stream_options": {"include_usage": False}},
    )

    frames = _data_frames(resp.content)
    assert not any(_is_usage_only(f) for f in frames)
    assert frames[-1] == DONE
    assert fake_upstream.bodies()[-1]["stream_options"] == {"include_usage": True}


def test_stream_frame_structure_is_kept(http: httpx.Client, fake_upstream: FakeUpstream) -> None:
    body, scripted = CASES["parallel_tool_calls"]
    fake_upstream.script(scripted)

    resp = http.post("/v1/chat/completions", json=_with_usage(body))

    frames = _data_frames(resp.content)
    assert frames[-1] == DONE
    chunks = [_payload(f) for f in frames[:-1]]
    # The first, role-only frame is kept as its own frame.
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    # Each tool call's first delta keeps index, id and name.
    heads = [
        call
        for c in chunks
        for choice in c["choices"]
        for call in choice["delta"].get("tool_calls") or []
        if "id" in call
    ]
    assert [(h["index"], h["id"], h["function"]["name"]) for h in heads] == [
        (0, "call_w", "get_weather"),
        (1, "call_t", "get_time"),
    ]
    # One finish frame, then one usage frame, then [DONE].
    finishing = [c for c in chunks if any(ch["finish_reason"] for ch in c["choices"])]
    assert finishing == [chunks[-2]]
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


def test_final_frame_with_finish_reason_and_usage_stays_one_frame(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    # Some providers (vLLM, llama.cpp) put usage on the finish frame itself.
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    first = {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]}
    last = {
        **base,
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 321, "completion_tokens": 1, "total_tokens": 322},
    }
    wire = [f"data: {json.dumps(first)}\n\n", f"data: {json.dumps(last)}\n\n", "data: [DONE]\n\n"]
    fake_upstream.script(raw(*wire))

    resp = http.post(
        "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True},
    )

    assert _data_frames(resp.content) == [w.encode().rstrip(b"\n") for w in wire]
    sid = resp.headers["x-session-id"]
    shown = wait_for(lambda: http.get(f"/v1/sessions/{sid}").json().get("last_prompt_tokens"))
    assert shown == 321


def test_real_prompt_tokens_learned_from_stripped_usage_frame(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("fine", usage=(1234, 1)))

    resp = http.post(
        "/v1/chat/completions",
        json={
            "model": "gpt-fake",
            "messages": [{"role": "user", "content": "ok?"}],
            "stream": True,
        },
    )

    assert not any(_is_usage_only(f) for f in _data_frames(resp.content))
    sid = resp.headers["x-session-id"]
    shown = wait_for(lambda: http.get(f"/v1/sessions/{sid}").json().get("last_prompt_tokens"))
    assert shown == 1234


# --------------------------------------------------------------------------- official SDK


def test_sdk_stream_reassembles_parallel_tool_calls(
    client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    body, scripted = CASES["parallel_tool_calls"]
    fake_upstream.script(scripted)

    stream = client.chat.completions.create(**body, stream=True)
    calls: dict[int, dict[str, str]] = {}
    text, finish = "", None
    for chunk in stream:
        assert chunk.usage is None
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for d in choice.delta.tool_calls or []:
                call = calls.setdefault(d.index, {"id": "", "name": "", "args": ""})
                call["id"] += d.id or ""
                call["name"] += (d.function and d.function.name) or ""
                call["args"] += (d.function and d.function.arguments) or ""

    assert text == "Checking both."
    assert finish == "tool_calls"
    assert [(c["id"], c["name"], json.loads(c["args"])) for c in calls.values()] == [
        ("call_w", "get_weather", {"city": "Oslo", "unit": "C"}),
        ("call_t", "get_time", {"city": "Oslo"}),
    ]


def test_sdk_stream_with_usage_n_and_logprobs(
    client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    body, scripted = CASES["n_and_logprobs"]
    fake_upstream.script(scripted)

    chunks = list(
        client.chat.completions.create(**body, stream=True, stream_options={"include_usage": True})
    )

    texts: dict[int, str] = {}
    tokens: dict[int, list[str]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            for lp in (choice.logprobs and choice.logprobs.content) or []:
                tokens.setdefault(choice.index, []).append(lp.token)
    assert texts == {0: "Seven, I think.", 1: "Seven, I think."}
    assert {i: "".join(t) for i, t in tokens.items()} == texts
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == len("Pick a number.") // 4


# --------------------------------------------------------------------------- timing


@pytest.mark.parametrize(
    "path", ["/v1/chat/completions", "/s/run-1/v1/chat/completions"], ids=["plain", "session-path"]
)
def test_frames_are_relayed_as_they_arrive(
    http: httpx.Client, fake_upstream: FakeUpstream, path: str
) -> None:
    # role, 4 content pieces, finish, usage, [DONE]; the provider sends each of the first five
    # only after the client has had the one before, so a relay that held frames back stalls.
    pacer = Pacer()
    fake_upstream.script(reply("one two three four", chunks=4, pacer=pacer))
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "count"}], "stream": True}

    data = []
    with http.stream("POST", path, json=body) as resp:
        for line in resp.iter_lines():
            if line.startswith("data:"):
                data.append(line)
                pacer.allow(1 if len(data) < 5 else 10)

    assert not pacer.expired
    assert len(data) == 7  # usage frame stripped
    content = [json.loads(d[5:])["choices"][0]["delta"].get("content") for d in data[1:5]]
    assert "".join(content) == "one two three four"


def test_keepalive_comments_while_waiting_for_first_token(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    body, _ = CASES["text"]
    slow = reply("Hello there, très chère — 你好!", id="chatcmpl-s-text", chunks=5)
    fake_upstream.script(slow, dataclasses.replace(slow, first_token_delay=0.8))
    expected = [f for f in _direct_frames(fake_upstream, body) if not _is_usage_only(f)]

    _, lines = _timed_lines(http, {**body, "stream": True})

    first_data = next(i for i, (_, line) in enumerate(lines) if line.startswith("data:"))
    comments = lines[:first_data]
    assert comments and all(line == KEEPALIVE.decode() for _, line in comments)
    assert comments[0][0] < 0.7  # sent while the upstream was still silent
    data = [line.encode() for _, line in lines if line.startswith("data:")]
    assert data == expected


def test_keepalive_comments_while_upstream_headers_are_delayed(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    body, _ = CASES["text"]
    slow = reply("Hello there, très chère — 你好!", id="chatcmpl-s-text", chunks=5)
    fake_upstream.script(slow, dataclasses.replace(slow, first_byte_delay=0.9))
    expected = [f for f in _direct_frames(fake_upstream, body) if not _is_usage_only(f)]

    t_headers, lines = _timed_lines(http, {**body, "stream": True})

    assert t_headers < 0.8  # the client got its 200 before the upstream answered at all
    first_data = next(i for i, (_, line) in enumerate(lines) if line.startswith("data:"))
    assert first_data >= 1
    assert all(line == KEEPALIVE.decode() for _, line in lines[:first_data])
    data = [line.encode() for _, line in lines if line.startswith("data:")]
    assert data == expected
