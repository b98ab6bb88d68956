"""A later ``read_tool_output`` round refused as too long for the window teaches the session
as the first round's refusal does: relayed with its status while nothing went out, in-band
after a frame did, and the session's calibration raised either way."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.fakes.replies import context_length_exceeded, raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, wait_for
from tests.integration.api.read_tool_output_helpers import chat, history, read_call
from tests.integration.api.test_read_tool_output_answers import (
    config_path,  # noqa: F401  (the module's config: maxChars 2000, raw outputs kept)
)
from tests.integration.transcripts import api, blob


def _calibration(proxy: ProxyServer, sid: str) -> Any:
    with api(proxy) as http:
        return http.get(f"/v1/sessions/{sid}").json()["calibration"]


def _raised(proxy: ProxyServer, sid: str) -> bool:
    """Whether the session's calibration went up, waited for: relayed in-band, the refusal's
    error frame and ``[DONE]`` go out before the turn ends, and the turn's last statement
    (``Turn.abort``/``finish``) stores the calibration just after them."""
    return bool(wait_for(lambda: _calibration(proxy, sid) > 1.0))


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_a_later_rounds_refusal_for_length_raises_the_calibration(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    fake_upstream.script(
        reply(None, tool_calls=[read_call(id="call_big", offset=0)]), context_length_exceeded()
    )
    messages = history("call_big", blob(9000, "big"))
    with pytest.raises(openai.BadRequestError) as info:
        out = chat(proxy, "rounds", messages, stream=stream)
        if stream:
            list(out)
    assert info.value.code == "context_length_exceeded"
    assert _calibration(proxy, "rounds") > 1.0


def test_a_later_rounds_refusal_for_length_after_a_frame_went_out_raises_it_too(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(
        reply("let me look", tool_calls=[read_call(id="call_big", offset=0)]),
        context_length_exceeded(),
    )
    messages = history("call_big", blob(9000, "big"))
    with pytest.raises(openai.APIError) as info:
        list(chat(proxy, "in-band", messages, stream=True))
    assert not isinstance(info.value, openai.APIStatusError)
    assert _raised(proxy, "in-band"), _calibration(proxy, "in-band")


def test_an_error_object_in_a_streams_body_refusing_for_length_raises_it_too(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """A server that answers 200 and puts the refusal in the stream (its error object
    instead of chunks): relayed in-band as it came, and learnt from all the same."""
    failure = {"error": {"message": "too long", "type": "invalid_request_error"}}
    failure["error"]["code"] = "context_length_exceeded"
    fake_upstream.script(raw(f"data: {json.dumps(failure)}\n\n", "data: [DONE]\n\n"))
    with pytest.raises(openai.APIError):
        list(chat(proxy, "in-body", [{"role": "user", "content": "go"}], stream=True, tools=None))
    assert _raised(proxy, "in-body"), _calibration(proxy, "in-body")
