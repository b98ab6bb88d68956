"""An embeddings body that is not a JSON object is the proxy's OpenAI-shaped 400, as a chat
body is, and never goes to the provider: one that cannot parse a body answers what it
likes (an HTML page, a 500, a 404 from some servers), which the client could not read as the
error it made. A JSON object goes on as the bytes the client sent, fields the proxy does not
know included."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes.upstream import EMBEDDINGS, FakeUpstream

BAD = [b"not json", b"[1, 2]", b'"text"', b"", b'{"model": "e", "input": "a"']


@pytest.mark.parametrize("base", ["/v1", "/s/run-1/v1"], ids=["plain", "session-path"])
@pytest.mark.parametrize("body", BAD, ids=[b.decode() or "empty" for b in BAD])
def test_a_body_that_is_no_json_object_is_a_400_never_sent(
    http: httpx.Client, fake_upstream: FakeUpstream, base: str, body: bytes
) -> None:
    resp = http.post(
        base + "/embeddings", content=body, headers={"content-type": "application/json"}
    )

    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert "JSON" in error["message"]
    assert fake_upstream.requests == []


def test_a_json_object_goes_on_byte_for_byte(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    body = b'{ "model":"e",  "input":["a","b"], "x_extra": 1.50 }'

    resp = http.post("/v1/embeddings", content=body, headers={"content-type": "application/json"})

    assert resp.status_code == 200, resp.text
    (seen,) = fake_upstream.wait_for_requests(1)
    assert seen.path == EMBEDDINGS
    assert seen.content == body
