"""``provider_errors.completion`` says whether a whole answer was built from a stream's
chunks: exactly the bodies that open as events (``stream_whole.opens_as_events``), which
forward rewrote before it was told, so no answer a JSON parser reads, however it opens (a
byte-order mark, blank space, UTF-16, ``NaN``, a string holding an event), counts as
streamed, and every stream does."""

from __future__ import annotations

import json

import httpx
import pytest

from proxy.config import ProviderConfig
from proxy.provider_errors import completion
from proxy.stream_whole import opens_as_events
from proxy.upstream import Answer

PROVIDER = ProviderConfig(base_url="http://127.0.0.1:9/v1", name="openai")
EVENT = "\n\ndata: {}\n\n"
WHOLE = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": EVENT}, "finish_reason": "stop"}
    ],
}
CHUNK = json.dumps(
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}],
    }
)
TEXT = json.dumps(WHOLE)


@pytest.mark.parametrize(
    ("body", "streamed"),
    [
        (TEXT.encode(), False),
        (b"\xef\xbb\xbf" + TEXT.encode(), False),
        (b" \r\n\t" + TEXT.encode(), False),
        (TEXT.encode("utf-16"), False),
        (TEXT.replace('"created": 1', '"created": NaN').encode(), False),
        (f"data: {CHUNK}\n\ndata: [DONE]\n\n".encode(), True),
        (f"\ufeff\n: keep-alive\n\ndata: {CHUNK}\n\n".encode(), True),
        (f"event: message\ndata: {CHUNK}\n\n".encode(), True),
    ],
    ids=["json", "bom", "blank space", "utf-16", "nan", "events", "bom comment", "event name"],
)
def test_streamed_is_whether_the_body_opens_as_events(body: bytes, streamed: bool) -> None:
    answer = Answer(200, httpx.Headers({"content-type": "application/json"}), body)
    data, said = completion(answer, PROVIDER)
    assert (said, opens_as_events(body)) == (streamed, streamed)
    assert data["choices"][0]["finish_reason"] == "stop"
