"""The openai SDK's calls to OpenAI's APIs the proxy does not serve (the Responses API,
stored chat completions): an OpenAI-shaped 404 ``unknown_url`` that names the APIs it
serves, and no provider call."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config

_SERVED = "the proxy serves chat completions (POST /v1/chat/completions)"


def test_the_sdks_responses_api_is_a_404_naming_what_is_served(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    client = openai.OpenAI(base_url=proxy.url, api_key="sk-client", max_retries=0)
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model="gpt-fake", input="hi")
    assert missing.value.code == "unknown_url"
    assert "Invalid URL (POST /v1/responses); of OpenAI" in missing.value.message
    assert _SERVED in missing.value.message
    assert "models (GET /v1/models) and embeddings (POST /v1/embeddings)" in missing.value.message
    with pytest.raises(openai.NotFoundError) as stored:
        client.chat.completions.retrieve("chatcmpl-1")
    assert _SERVED in stored.value.message
    session = openai.OpenAI(base_url=f"{proxy.origin}/s/s1/v1", api_key="sk-client")
    with pytest.raises(openai.NotFoundError) as in_session:
        session.with_options(max_retries=0).responses.create(model="gpt-fake", input="hi")
    assert _SERVED in in_session.value.message
    with pytest.raises(openai.NotFoundError) as other:  # a path of no API: the plain words
        client.get("/nope", cast_to=object)
    assert other.value.message.endswith(" - Invalid URL (GET /v1/nope)")
    assert not fake_upstream.requests
