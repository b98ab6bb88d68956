"""The headers OpenAI's SDKs read to decide whether and when to retry reach them through
the proxy, as they would from the provider alone.

The SDKs read ``retry-after-ms`` before ``retry-after`` and obey ``x-should-retry`` over
their own rule (openai-python's ``_should_retry`` and ``_calculate_retry_timeout``).
"""

from __future__ import annotations

import time

import openai
import pytest

from tests.fakes.replies import error, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer

MESSAGES = [{"role": "user", "content": "hello"}]
RETRY_HEADERS = {"retry-after": "20", "retry-after-ms": "20000", "x-should-retry": "false"}


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_a_providers_retry_headers_reach_the_client(
    stream: bool, client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(error(429, headers=RETRY_HEADERS))

    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="gpt-fake", messages=MESSAGES, stream=stream)

    headers = caught.value.response.headers
    assert {k: headers.get(k) for k in RETRY_HEADERS} == RETRY_HEADERS


def test_the_sdk_does_not_retry_what_the_provider_says_not_to(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(error(503, headers={"x-should-retry": "false"}), reply("too late"))
    client = openai.OpenAI(base_url=proxy.url, api_key="sk-test-client", max_retries=2)

    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="gpt-fake", messages=MESSAGES)

    assert len(fake_upstream.bodies()) == 1


def test_the_sdk_waits_the_providers_retry_after_ms(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # retry-after-ms (10 ms) wins over retry-after (3 s) when the client gets it.
    fake_upstream.script(error(429, headers={"retry-after": "3", "retry-after-ms": "10"}))
    client = openai.OpenAI(base_url=proxy.url, api_key="sk-test-client", max_retries=1)

    started = time.monotonic()
    answer = client.chat.completions.create(model="gpt-fake", messages=MESSAGES)

    # Retry-after's wait alone would be 3 s: anything under it is retry-after-ms's, however
    # slowly the two requests go through on a loaded machine.
    assert time.monotonic() - started < 3
    assert answer.choices[0].message.content == "ok"
    assert len(fake_upstream.bodies()) == 2
