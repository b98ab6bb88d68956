from __future__ import annotations

import openai

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream


def test_nonstream_roundtrip(client: openai.OpenAI, fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(reply("hello there"))
    out = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )
    assert out.choices[0].message.content == "hello there"


def test_stream_roundtrip(client: openai.OpenAI, fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(reply("streamed words here"))
    stream = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "streamed words here"
