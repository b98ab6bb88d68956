"""The client's query string reaches the provider's chat completions, as it reaches
``/v1/models`` and ``/v1/embeddings``: an SDK's ``extra_query`` (a gateway's
``api-version``) was dropped from chat requests only."""

from __future__ import annotations

import openai
import pytest

from tests.fakes.upstream import CHAT, FakeUpstream

MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_the_query_string_goes_upstream_with_the_chat_request(
    stream: bool, client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    answer = client.chat.completions.create(
        model="gpt-fake",
        messages=MESSAGES,
        stream=stream,
        extra_query={"api-version": "2024-10-21", "tag": ["a", "b"]},
    )
    if stream:
        list(answer)  # type: ignore[arg-type]
    client.chat.completions.create(model="gpt-fake", messages=MESSAGES, stream=stream)

    queries = [r.query for r in fake_upstream.requests if r.path == CHAT]
    # (the SDK writes a list as tag[]=a&tag[]=b; both values go on, in order)
    assert queries == ["api-version=2024-10-21&tag%5B%5D=a&tag%5B%5D=b", ""]
