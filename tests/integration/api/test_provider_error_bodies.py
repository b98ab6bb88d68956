"""A provider that answers 200 with an OpenAI error object instead of a completion (some
gateways and self-hosted servers do, on an overload or a bad request): the client gets an
OpenAI-shaped error that quotes the provider's message, whole or streamed, one log line
names the provider without its body, nothing is stored for the turn, and the session goes on.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.fakes.replies import raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, Records, wait_for
from tests.integration.api.sessions_helpers import live_messages

_FAILURE = {"error": {"message": "model overloaded", "type": "server_error", "code": "busy"}}
_FIRST = [{"role": "user", "content": "hi"}]
_SECOND = [*_FIRST, {"role": "assistant", "content": "first"}, {"role": "user", "content": "go"}]


def _sdk(proxy: ProxyServer, sid: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=proxy.url,
        api_key="sk-test-client",
        max_retries=0,
        default_headers={"x-session-id": sid},
    )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    "content_type", ["application/json", "text/event-stream"], ids=["json", "sse-type"]
)
def test_a_200_error_object_is_an_openai_error_and_stores_nothing(
    stream: bool,
    content_type: str,
    proxy: ProxyServer,
    http: httpx.Client,
    fake_upstream: FakeUpstream,
    records: Records,
) -> None:
    sid = f"ok-error-{int(stream)}-{content_type[:4]}"
    client = _sdk(proxy, sid)
    fake_upstream.script(reply("first"))
    client.chat.completions.create(model="m", messages=_FIRST)
    # a whole reply is stored just after its response went out
    assert wait_for(lambda: len(live_messages(http, sid)) == 2)
    before = live_messages(http, sid)
    fake_upstream.script(raw(json.dumps(_FAILURE), headers={"content-type": content_type}))

    with pytest.raises(openai.APIError, match="model overloaded"):
        answer = client.chat.completions.create(model="m", messages=_SECOND, stream=stream)
        for _ in answer if stream else ():
            pass

    lines = [
        r.getMessage() for r in records.errors() if "answered 200 with an error" in r.getMessage()
    ]
    assert len(lines) == 1, [r.getMessage() for r in records.errors()]
    assert "model overloaded" not in lines[0] and "busy" in lines[0]
    assert live_messages(http, sid) == [*before, _SECOND[-1]]  # the client's message, no reply
    fake_upstream.script(reply("after"))
    again = client.chat.completions.create(model="m", messages=_SECOND)
    assert again.choices[0].message.content == "after"


@pytest.mark.parametrize(
    "body",
    ["<html><body>Sign in</body></html>", "hello\nworld\n", 'data: {"id": "x", "choi\n\n'],
    ids=["html", "text", "cut-json"],
)
def test_a_stream_answered_with_no_chat_chunk_is_an_error_frame(
    body: str,
    proxy: ProxyServer,
    http: httpx.Client,
    fake_upstream: FakeUpstream,
    records: Records,
) -> None:
    # A login page or a wrong baseUrl's answer: relayed as it came, the SDK read it as an
    # empty, successful stream (or failed parsing it), and nothing was logged.
    sid = "no-chat-chunk"
    client = _sdk(proxy, sid)
    fake_upstream.script(raw(body, headers={"content-type": "text/html"}))

    with pytest.raises(openai.APIError, match="is no chat stream"):
        for _ in client.chat.completions.create(model="m", messages=_FIRST, stream=True):
            pass

    lines = [r.getMessage() for r in records.errors() if "is no chat stream" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in records.errors()]
    assert live_messages(http, sid) == _FIRST
