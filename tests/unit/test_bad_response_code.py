"""A provider that answered, but unusably, is a 502 ``upstream_bad_response``; one that could
not be reached keeps ``upstream_unreachable``. Both are 502s: the SDKs key on the status."""

from __future__ import annotations

import httpx
import pytest

from proxy.config import ProviderConfig
from proxy.errors import UpstreamUnavailable
from proxy.provider_errors import completion, mapped_errors
from proxy.upstream import Answer

PROVIDER = ProviderConfig(base_url="http://127.0.0.1:9/v1", name="openai")


def _answer(body: bytes, content_type: str = "application/json") -> Answer:
    return Answer(200, httpx.Headers({"content-type": content_type}), body)


@pytest.mark.parametrize(
    "answer",
    [
        _answer(b'{"error": {"message": "overloaded", "type": "server_error", "code": null}}'),
        _answer(b'{"id": "c1", "choi'),
        _answer(b"<html>login</html>", "text/html"),
        _answer(b'{"id": "c1", "object": "chat.completion", "choices": [{"message": 3}]}'),
        _answer(b'{"choices": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
    ],
    ids=["error object", "JSON cut short", "HTML", "malformed choices", "nested too deep"],
)
def test_a_whole_answer_that_is_no_completion_is_a_bad_response(answer: Answer) -> None:
    with pytest.raises(UpstreamUnavailable) as info:
        completion(answer, PROVIDER)
    assert info.value.status_code == 502
    assert info.value.code == "upstream_bad_response"


def test_a_body_that_broke_off_is_a_bad_response_and_a_refusal_is_unreachable() -> None:
    with pytest.raises(UpstreamUnavailable) as cut, mapped_errors(PROVIDER, answered=200):
        raise httpx.ReadError("connection reset")
    with pytest.raises(UpstreamUnavailable) as refused, mapped_errors(PROVIDER):
        raise httpx.ConnectError("connection refused")
    assert (cut.value.status_code, cut.value.code) == (502, "upstream_bad_response")
    assert (refused.value.status_code, refused.value.code) == (502, "upstream_unreachable")


def test_a_body_that_did_not_decode_is_not_said_to_have_broken_off() -> None:
    """A corrupt gzip body arrived whole: "the connection closed before the body's end"
    sent the operator after the network, where the provider's encoding is what failed."""
    with pytest.raises(UpstreamUnavailable) as bad, mapped_errors(PROVIDER, answered=200):
        raise httpx.DecodingError("Error -3 while decompressing data: incorrect header check")
    message = str(bad.value)
    assert "closed" not in message and "broke off" not in message, message
    assert "did not decode (DecodingError: Error -3 while decompressing data" in message
    assert bad.value.code == "upstream_bad_response"
