"""The fake upstream answers ``n`` as OpenAI does: each choice up to 128, a 400 past it.

The proxy forwards ``n`` as sent (the provider judges its most) and ``/openapi.json`` says
OpenAI's most, 128; schemathesis's invalid requests send past it (129, and numbers like
2**57), which a fake that rendered every choice it was asked for never finished answering."""

from __future__ import annotations

import json

import pytest

from tests.fakes.rendering import render
from tests.fakes.replies import RecordedRequest, Reply


def _request(n: object, *, stream: bool = False) -> RecordedRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": n}
    if stream:
        body["stream"] = True
    raw = json.dumps(body).encode()
    return RecordedRequest("POST", "/v1/chat/completions", "", {}, body, raw)


@pytest.mark.parametrize("stream", [False, True])
def test_n_past_128_is_refused_as_openai_refuses_it(stream: bool) -> None:
    for n in (129, 2**57):
        answer = render(Reply(), _request(n, stream=stream))
        assert answer.status == 400
        error = json.loads(b"".join(answer.frames))["error"]
        assert error["param"] == "n" and set(error) == {"message", "type", "param", "code"}


def test_n_of_128_is_answered_with_each_choice() -> None:
    answer = render(Reply(), _request(128))
    assert answer.status == 200
    assert len(json.loads(b"".join(answer.frames))["choices"]) == 128
