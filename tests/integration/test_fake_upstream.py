"""The fake upstream speaks OpenAI well enough for the official SDK and raw httpx."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.fakes.rendering import count_prompt_tokens, fake_embedding
from tests.fakes.replies import (
    Pacer,
    context_length_exceeded,
    error,
    rate_limited,
    raw,
    reply,
    tool_call,
)
from tests.fakes.upstream import EMBEDDINGS, MODELS, FakeUpstream

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say hello to the whole wide world."},
]


def sdk(fake: FakeUpstream, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.url, api_key="x", max_retries=0, **kwargs)


def stream_chat(fake: FakeUpstream, **body) -> list:
    client = sdk(fake)
    return list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True, **body))


def test_non_streaming_reply_and_deterministic_usage(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(reply("Hello, world!"))
    out = sdk(fake_upstream).chat.completions.create(model="m", messages=MESSAGES)

    assert out.choices[0].message.content == "Hello, world!"
    assert out.choices[0].finish_reason == "stop"
    assert out.model == "m"
    assert out.usage is not None
    assert out.usage.prompt_tokens == count_prompt_tokens(MESSAGES) == 3 + 8
    assert out.usage.completion_tokens == len("Hello, world!") // 4


def test_requests_are_recorded_with_headers_and_body(fake_upstream: FakeUpstream) -> None:
    sdk(fake_upstream).chat.completions.create(
        model="m", messages=MESSAGES, extra_body={"unknown_field": 1}
    )
    [req] = fake_upstream.requests

    assert (req.method, req.path) == ("POST", "/v1/chat/completions")
    assert req.headers["authorization"] == "Bearer x"
    assert req.json["messages"] == MESSAGES
    assert req.json["unknown_field"] == 1
    assert fake_upstream.bodies() == [req.json]


def test_script_is_fifo_then_default(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(reply("one"), lambda req: reply(f"model={req.json['model']}"))
    client = sdk(fake_upstream)
    contents = [
        client.chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content
        for _ in range(3)
    ]

    assert contents == ["one", "model=m", "ok"]
    assert fake_upstream.pending() == 0


def test_stream_splits_content_and_omits_usage_unless_asked(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(reply("streamed words here", chunks=4))
    chunks = stream_chat(fake_upstream)

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert text == "streamed words here"
    assert len(pieces) == 4
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None and c.choices for c in chunks)


def test_usage_only_frame_when_include_usage(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(reply("abc", usage=(100, 7)))
    chunks = stream_chat(fake_upstream, stream_options={"include_usage": True})

    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (100, 7)
    assert all(c.usage is None for c in chunks[:-1])


def test_stream_ends_with_done_on_the_wire(fake_upstream: FakeUpstream) -> None:
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    with httpx.stream("POST", f"{fake_upstream.url}/chat/completions", json=body) as resp:
        lines = [line for line in resp.iter_lines() if line]

    assert resp.headers["content-type"].startswith("text/event-stream")
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)


def test_tool_call_deltas_reassemble(fake_upstream: FakeUpstream) -> None:
    args = {"pattern": "TODO", "path": "src/"}
    fake_upstream.script(
        reply(None, tool_calls=[tool_call("grep", args), {"name": "ls", "arguments": "{}"}])
    )
    chunks = stream_chat(fake_upstream)

    calls: dict[int, dict] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": None, "name": None, "arguments": ""})
            call["id"] = delta.id or call["id"]
            if delta.function and delta.function.name:
                call["name"] = delta.function.name
            if delta.function and delta.function.arguments:
                call["arguments"] += delta.function.arguments
    arg_deltas = [d for c in chunks for d in c.choices[0].delta.tool_calls or [] if d.id is None]

    assert calls[0] == {"id": "call_0_0", "name": "grep", "arguments": json.dumps(args)}
    assert calls[1] == {"id": "call_0_1", "name": "ls", "arguments": "{}"}
    assert len(arg_deltas) > 2  # arguments really arrive in pieces
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_n_and_logprobs_are_echoed(fake_upstream: FakeUpstream) -> None:
    out = sdk(fake_upstream).chat.completions.create(
        model="m", messages=MESSAGES, n=2, logprobs=True, top_logprobs=2
    )

    assert [c.index for c in out.choices] == [0, 1]
    assert out.choices[1].logprobs is not None
    assert out.choices[1].logprobs.content is not None
    assert "".join(t.token for t in out.choices[1].logprobs.content) == "ok"
    assert len(out.choices[1].logprobs.content[0].top_logprobs) == 2


def test_streamed_n_choices_interleave_with_logprobs(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(reply("abcdef", chunks=3))
    chunks = stream_chat(fake_upstream, n=2, logprobs=True)

    texts = {0: "", 1: ""}
    for chunk in chunks:
        choice = chunk.choices[0]
        if choice.delta.content:
            texts[choice.index] += choice.delta.content
            assert choice.logprobs is not None and choice.logprobs.content is not None
            assert choice.logprobs.content[0].token == choice.delta.content
    assert texts == {0: "abcdef", 1: "abcdef"}
    assert [c.choices[0].finish_reason for c in chunks[-2:]] == ["stop", "stop"]


def test_rate_limit_carries_retry_after(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(rate_limited(retry_after=7), rate_limited(retry_after=7))
    resp = httpx.post(f"{fake_upstream.url}/chat/completions", json={"messages": []})

    assert resp.status_code == 429
    assert resp.headers["retry-after"] == "7"
    assert resp.json()["error"]["code"] == "rate_limit_exceeded"
    with pytest.raises(openai.RateLimitError) as info:
        sdk(fake_upstream).chat.completions.create(model="m", messages=MESSAGES)
    assert info.value.response.headers["retry-after"] == "7"


def test_context_length_and_server_errors(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(context_length_exceeded(), error(500))
    client = sdk(fake_upstream)

    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="m", messages=MESSAGES)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    assert bad.value.code == "context_length_exceeded"


def test_reset_mid_stream_raises_on_the_client(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(reply("never finished", reset_after=2), reply("again", reset_after=2))
    body = {"messages": [], "stream": True}
    lines = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("POST", f"{fake_upstream.url}/chat/completions", json=body) as resp,
    ):
        lines.extend(line for line in resp.iter_lines() if line)
    received = []
    stream = sdk(fake_upstream).chat.completions.create(model="m", messages=MESSAGES, stream=True)
    # openai>=2 wraps the transport error; older SDKs let httpx's error through.
    with pytest.raises((openai.APIConnectionError, httpx.TransportError)):
        received.extend(stream)

    assert len(lines) == 2
    assert "data: [DONE]" not in lines
    assert len(received) == 2
    assert fake_upstream.disconnects == []


def test_first_byte_delay_holds_back_headers(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(reply("x", first_byte_delay=0.3))
    start = time.monotonic()
    with httpx.stream("POST", f"{fake_upstream.url}/chat/completions", json={"messages": []}):
        headers_at = time.monotonic() - start

    assert headers_at >= 0.3


def test_first_token_delay_sends_headers_first(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(reply("x", first_token_delay=0.3))
    body = {"messages": [], "stream": True}
    start = time.monotonic()
    with httpx.stream("POST", f"{fake_upstream.url}/chat/completions", json=body) as resp:
        next(resp.iter_lines())
        assert time.monotonic() - start >= 0.3  # the first frame waited


def test_first_token_delay_does_not_hold_back_the_headers(fake_upstream: FakeUpstream) -> None:
    # The headers come while the first token is still held back: held with it, they would
    # take the whole delay, far past the client's timeout.
    fake_upstream.script(reply("x", first_token_delay=60))
    body = {"messages": [], "stream": True}
    with httpx.stream(
        "POST", f"{fake_upstream.url}/chat/completions", json=body, timeout=10
    ) as resp:
        assert resp.status_code == 200
    assert _disconnects(fake_upstream) == [0]  # it left while the token waited


def test_client_disconnect_is_recorded(fake_upstream: FakeUpstream) -> None:
    # The rest of the answer waits for the test, which never lets it go: the client leaves
    # while the fake still has frames to send.
    fake_upstream.script(reply("a b c d e f", chunks=6, pacer=Pacer()))
    body = {"messages": [], "stream": True}
    with httpx.stream("POST", f"{fake_upstream.url}/chat/completions", json=body) as resp:
        next(resp.iter_lines())

    assert _disconnects(fake_upstream) == [0]


def _disconnects(fake: FakeUpstream) -> list[int]:
    """The fake's disconnects once it saw one (within 5 s): it notices a little later."""
    deadline = time.monotonic() + 5
    while not fake.disconnects and time.monotonic() < deadline:
        time.sleep(0.01)
    return fake.disconnects


def test_raw_frames_are_sent_verbatim(fake_upstream: FakeUpstream) -> None:
    frames = (": keep-alive\n\n", 'data: {"odd": true}\n\n', "data: [DONE]\n\n")
    fake_upstream.script(raw(*frames))
    resp = httpx.post(f"{fake_upstream.url}/chat/completions", json={"stream": True})

    assert resp.text == "".join(frames)


def test_a_pacer_sends_each_frame_only_when_allowed(fake_upstream: FakeUpstream) -> None:
    pacer = Pacer()
    fake_upstream.script(raw("data: 1\n\n", "data: 2\n\n", "data: 3\n\n", pacer=pacer))
    with httpx.stream("POST", f"{fake_upstream.url}/chat/completions", json={}) as resp:
        lines = (line for line in resp.iter_lines() if line)
        assert next(lines) == "data: 1"  # the first frame goes at once
        pacer.allow()
        assert next(lines) == "data: 2"
        pacer.allow()
        assert list(lines) == ["data: 3"]
    assert not pacer.expired


def test_a_frame_never_allowed_ends_the_body_there(fake_upstream: FakeUpstream) -> None:
    pacer = Pacer(patience=0.2)
    fake_upstream.script(raw("data: 1\n\n", "data: 2\n\n", pacer=pacer))
    resp = httpx.post(f"{fake_upstream.url}/chat/completions", json={}, timeout=10)

    assert resp.text == "data: 1\n\n"
    assert pacer.expired


def test_a_pacer_for_the_first_frame_holds_a_whole_answer_until_allowed(
    fake_upstream: FakeUpstream,
) -> None:
    pacer = Pacer(first=True)
    fake_upstream.script(reply("held", pacer=pacer))
    with ThreadPoolExecutor(1) as pool:
        url = f"{fake_upstream.url}/chat/completions"
        answer = pool.submit(httpx.post, url, json={}, timeout=10)
        fake_upstream.wait_for_requests(1)
        pacer.allow(10)  # the headers and the body
        assert answer.result(10).json()["choices"][0]["message"]["content"] == "held"
    assert not pacer.expired


def test_a_whole_answer_never_allowed_is_a_504(fake_upstream: FakeUpstream) -> None:
    pacer = Pacer(patience=0.2, first=True)
    fake_upstream.script(reply("never", pacer=pacer))
    resp = httpx.post(f"{fake_upstream.url}/chat/completions", json={}, timeout=10)

    assert (resp.status_code, resp.text) == (504, "")
    assert pacer.expired


def test_models_and_embeddings(fake_upstream: FakeUpstream) -> None:
    client = sdk(fake_upstream)
    models = [m.id for m in client.models.list()]
    vectors = client.embeddings.create(model="e", input=["alpha", "beta"])  # base64 on the wire
    floats = httpx.post(
        f"{fake_upstream.url}/embeddings", json={"model": "e", "input": "alpha", "dimensions": 4}
    ).json()

    assert models == list(fake_upstream.models)
    assert [d.embedding for d in vectors.data] == [fake_embedding("alpha"), fake_embedding("beta")]
    assert floats["data"][0]["embedding"] == fake_embedding("alpha", 4)
    assert [r.path for r in fake_upstream.requests] == [MODELS, EMBEDDINGS, EMBEDDINGS]


def test_an_embeddings_body_openai_refuses_is_its_400(fake_upstream: FakeUpstream) -> None:
    """What a fuzzer built from /openapi.json sends: a dimensions past OpenAI's most (a
    vector that large would be built), of another type, or an input of no allowed form."""
    for body in (
        {"model": "e", "input": "a", "dimensions": 10**9},
        {"model": "e", "input": "a", "dimensions": "4"},
        {"model": "e", "input": [{"x": 1}]},
        {"model": "e", "input": []},
    ):
        resp = httpx.post(f"{fake_upstream.url}/embeddings", json=body)
        assert resp.status_code == 400, body
        assert resp.json()["error"]["type"] == "invalid_request_error", body


def test_script_can_target_other_endpoints(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(error(503), endpoint=MODELS)

    assert httpx.get(f"{fake_upstream.url}/models").status_code == 503
    assert httpx.get(f"{fake_upstream.url}/models").status_code == 200
    assert httpx.get(f"{fake_upstream.url}/nope").status_code == 404


def test_close_is_prompt_even_with_a_request_in_flight() -> None:
    fake = FakeUpstream().start()
    fake.script(reply("slow", first_byte_delay=30))
    with httpx.Client(timeout=0.2) as client, pytest.raises(httpx.ReadTimeout):
        client.post(f"{fake.url}/chat/completions", json={"messages": []})
    start = time.monotonic()
    fake.close()

    assert time.monotonic() - start < 1.0
