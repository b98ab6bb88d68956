"""A provider's refusal for length whose body is no JSON teaches the session the same
whether the request streamed or not: the stream's relayed error is the proxy's rewrite of
the body (``provider_refusal``), which quotes only the body's head, so the session learns
from the body as the provider sent it, as a non-streamed request's does."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.fakes.replies import raw
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.read_tool_output_helpers import chat
from tests.integration.transcripts import api

_PREAMBLE = "Request rejected by the inference server. " * 8  # past what a message quotes
_REFUSAL = _PREAMBLE + (
    "This model's maximum context length is 8192 tokens, and your messages resulted in 9000 tokens."
)


def _calibration(proxy: ProxyServer, sid: str) -> Any:
    with api(proxy) as http:
        return http.get(f"/v1/sessions/{sid}").json()["calibration"]


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_a_plain_text_refusal_for_length_raises_the_calibration(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    fake_upstream.script(raw(_REFUSAL, status=400, headers={"content-type": "text/plain"}))
    sid = f"plain-{stream}"
    with pytest.raises(openai.BadRequestError) as info:
        out = chat(proxy, sid, [{"role": "user", "content": "hi"}], stream=stream, tools=None)
        if stream:
            list(out)
    assert info.value.code == "400"
    assert _calibration(proxy, sid) > 1.0
