"""A provider error in a later ``read_tool_output`` round of a stream. While the client has
been sent nothing (the round before called only the proxy's tool, and no keep-alive went out),
the error reaches it as a non-streamed request's does, with the provider's status, body and
``Retry-After``: the SDKs retry a 429 and raise its class, and a 400's with the provider's
``code``. Once a frame went out, the status is committed and the error goes in-band."""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest

from tests.fakes.replies import context_length_exceeded, error, rate_limited, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, wait_for
from tests.integration.api.read_tool_output_helpers import (
    CLIENT_TOOLS,
    chat,
    history,
    read_call,
)
from tests.integration.api.test_read_tool_output_answers import (
    config_path,  # noqa: F401  (the module's config: maxChars 2000, raw outputs kept)
)
from tests.integration.transcripts import api, blob, replay_events, sdk


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_a_later_rounds_429_before_any_frame_keeps_its_status(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    fake_upstream.script(
        reply(None, tool_calls=[read_call(id="call_big", offset=0)]),
        rate_limited(7),
        reply(None, tool_calls=[read_call(id="call_big", offset=0)]),
        reply("found it"),
    )
    messages = history("call_big", blob(9000, "big"))
    with pytest.raises(openai.RateLimitError) as info:
        out = chat(proxy, "limited", messages, stream=stream)
        if stream:
            list(out)
    assert info.value.status_code == 429 and info.value.code == "rate_limit_exceeded"
    assert info.value.response.headers["retry-after"] == "7"
    assert info.value.response.headers["x-session-id"] == "limited"
    with api(proxy) as http:
        rows = http.get("/v1/sessions/limited/messages").json()["data"]
        names = [name for name, _ in replay_events(http, "limited")]
    assert [r["message"]["role"] for r in rows] == ["user", "assistant", "tool"]
    # refused with a status: no context.usage on either path (docs/events.md), though the
    # provider answered the round before
    assert "context.usage" not in names, names

    out = chat(proxy, "limited", messages, stream=stream)  # the retry an SDK makes
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in out if c.choices)
    else:
        text = out.choices[0].message.content
    assert text == "found it"


def test_a_later_rounds_context_length_exceeded_is_the_400(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    error = context_length_exceeded()
    fake_upstream.script(reply(None, tool_calls=[read_call(id="call_big", offset=0)]), error)
    messages = history("call_big", blob(9000, "big"))
    with pytest.raises(openai.BadRequestError) as info:
        list(chat(proxy, "too-long", messages, stream=True))
    assert info.value.body == error.body["error"]


def test_a_later_rounds_error_after_a_frame_went_out_is_in_band(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(
        reply("let me look", tool_calls=[read_call(id="call_big", offset=0)]), rate_limited(7)
    )
    messages = history("call_big", blob(9000, "big"))
    chunks = []
    with pytest.raises(openai.APIError) as info:
        for chunk in chat(proxy, "in-band", messages, stream=True):
            chunks.append(chunk)
    assert not isinstance(info.value, openai.APIStatusError)
    assert "answered 429 (Retry-After: 7)" in info.value.message and info.value.code == "429"
    assert info.value.body["retry_after"] == "7"  # type: ignore[index]  # no header can carry it
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "let me look"


def test_a_client_that_hangs_up_after_the_read_ahead_ends_the_turn(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The body read ahead still ends as any other: the client leaves mid-answer, the
    provider's stream is closed and the session is free for its next request at once."""
    fake_upstream.script(
        reply(None, tool_calls=[read_call(id="call_big", offset=0)]),
        reply("a long answer " * 40, chunks=40, chunk_delay=0.1),
        reply("next"),
    )
    messages = history("call_big", blob(9000, "big"))
    body = {"model": "gpt-4o", "stream": True, "tools": CLIENT_TOOLS, "messages": messages}
    headers = {"X-Session-Id": "gone"}
    with (
        api(proxy) as http,
        http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as resp,
    ):
        assert resp.status_code == 200
        next(line for line in resp.iter_lines() if '"content": "a long' in line)
    assert wait_for(lambda: fake_upstream.disconnects == [1])
    started = time.monotonic()
    assert chat(proxy, "gone", messages).choices[0].message.content == "next"
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_a_clients_idempotency_key_is_not_forwarded(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    """A client's ``Idempotency-Key`` (the SDKs keep one across a request's retries) is kept
    from the provider (README, "What the provider sees"): the proxy makes more than one call
    of a request (the internal rounds), each with another body, and a retry's prompt may
    differ from the first try's, so a provider that honours the key would answer a later
    call with an earlier one's answer, or refuse it as the key reused."""
    fake_upstream.script(
        error(500, headers={"retry-after-ms": "10"}),
        reply(None, tool_calls=[read_call(id="call_big", offset=0)]),
        reply("found it"),
    )
    messages = history("call_big", blob(9000, "big"))
    client = sdk(proxy, f"keyed-{stream}").with_options(max_retries=1)
    out: Any = client.chat.completions.create(
        model="gpt-4o",
        messages=messages,
        tools=CLIENT_TOOLS,
        stream=stream,
        extra_headers={"Idempotency-Key": "stainless-retry-1"},
    )
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in out if c.choices)
    else:
        text = out.choices[0].message.content
    assert text == "found it"
    assert len(fake_upstream.requests) == 3  # the refused call, then two rounds
    assert all("idempotency-key" not in r.headers for r in fake_upstream.requests)
