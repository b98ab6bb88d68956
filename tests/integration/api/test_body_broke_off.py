"""A provider that answers and then breaks its whole (non-streamed) body off: the 502 and its
log line said the proxy "could not reach" it and to check its baseUrl, which sends an
operator after the wrong fault. They now say it answered and its body broke off; nothing is
stored for the turn and the session goes on."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.fakes.replies import raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, Records


def test_a_whole_answer_cut_off_mid_body_is_a_502_saying_so(
    proxy: ProxyServer, http: httpx.Client, fake_upstream: FakeUpstream, records: Records
) -> None:
    sid = "cut-body"
    client = openai.OpenAI(
        base_url=proxy.url,
        api_key="sk-test-client",
        max_retries=0,
        default_headers={"x-session-id": sid},
    )
    fake_upstream.script(reply("first"))
    turn = [{"role": "user", "content": "a"}]
    client.chat.completions.create(model="m", messages=turn)
    completion = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "w" * 5000},
                "finish_reason": "stop",
            }
        ],
    }
    body = json.dumps(completion).encode()
    fake_upstream.script(
        raw(body[:2000], body[2000:], headers={"content-type": "application/json"}, reset_after=1)
    )
    turn = [*turn, {"role": "assistant", "content": "first"}, {"role": "user", "content": "b"}]

    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="m", messages=turn)

    message = caught.value.message
    assert "answered 200" in message and "broke off" in message, message
    assert "the connection closed before the body's end" in message, message
    assert "could not reach" not in message and "baseUrl" not in message
    lines = [r.getMessage() for r in records.errors() if "broke off" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in records.errors()]
    causes = lines[0].split("(cause: ", 1)[1].split(" <- ")
    assert len({c.split(": ", 1)[-1] for c in causes}) == len(causes), lines  # each said once
    rows = http.get(f"/v1/sessions/{sid}/messages").json()["data"]
    assert [r["message"]["content"] for r in rows] == ["a", "first", "b"]
    fake_upstream.script(reply("after"))
    assert (
        client.chat.completions.create(model="m", messages=turn).choices[0].message.content
        == "after"
    )


def test_a_json_answer_that_does_not_parse_is_a_502_that_does_not_blame_the_base_url(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # A byte that is not UTF-8 in a whole answer: the provider is the right one, its JSON
    # is not (a stream gets U+FFFD instead: test_stream_invalid_utf8.py).
    body = (
        b'{"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": [{"index"'
        b': 0, "message": {"role": "assistant", "content": "caf\xe9"}, "finish_reason": "stop"}]}'
    )
    fake_upstream.script(raw(body, headers={"content-type": "application/json"}))
    client = openai.OpenAI(base_url=proxy.url, api_key="sk-test-client", max_retries=0)

    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])

    message = caught.value.message
    assert "does not parse" in message and "baseUrl" not in message, message
