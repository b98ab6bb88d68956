"""A provider whose stream holds bytes that are not UTF-8 (a server that cuts a character's
bytes between two tokens): the openai SDK decodes the stream as UTF-8 and raised
``UnicodeDecodeError`` mid-answer, while the proxy stored a reply the client never got. The
client now gets each invalid sequence as U+FFFD, the text the proxy stores, and its next
request, which resends that text, continues the stored history."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai

from tests.fakes.replies import raw
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, wait_for


def _frame(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def test_bytes_that_are_not_utf8_reach_the_sdk_as_the_stored_replacement_characters(
    proxy: ProxyServer, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    sid = "bad-utf8"
    broken = _frame({"content": "caf\u00e9 X"}).replace(b"X", b"\xe2\x82")
    fake_upstream.script(
        raw(
            _frame({"role": "assistant", "content": ""}),
            broken,
            _frame({}, "stop"),
            b"data: [DONE]\n\n",
        )
    )
    client = openai.OpenAI(
        base_url=proxy.url,
        api_key="sk-test-client",
        max_retries=0,
        default_headers={"x-session-id": sid},
    )
    turn = [{"role": "user", "content": "hi"}]

    stream = client.chat.completions.create(model="m", messages=turn, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    assert text == "caf\u00e9 \ufffd"

    def rows() -> list[dict[str, Any]]:
        return http.get(f"/v1/sessions/{sid}/messages").json()["data"]

    assert wait_for(lambda: len(rows()) == 2)  # stored just after the stream's last chunk
    assert rows()[-1]["message"]["content"] == text
    again = [*turn, {"role": "assistant", "content": text}, {"role": "user", "content": "go"}]
    client.chat.completions.create(model="m", messages=again)
    assert wait_for(lambda: len(rows()) == 4)
    assert [r["superseded"] for r in rows()] == [False] * 4
