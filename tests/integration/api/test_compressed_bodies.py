"""A request body sent with ``Content-Encoding``: ``gzip`` and ``deflate`` are decoded (the
SDK's client behind a transport that compresses what it sends), their decoded size bounded
as the body's is, so a zip bomb is the 413; another coding is the 415 naming it. Each answer
is OpenAI's shape, and the access line names the coding (README Decisions)."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import Records, StartProxy, write_config


class _Compressing(httpx.HTTPTransport):
    """Sends each body ``coding``-encoded, as a gateway or a client set to compress does."""

    def __init__(self, coding: str) -> None:
        super().__init__()
        self.coding = coding

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        packed = {"gzip": gzip.compress, "deflate": zlib.compress}.get(self.coding, bytes)(body)
        headers = {k: v for k, v in request.headers.items() if k != "content-length"}
        sent = httpx.Request(
            request.method,
            request.url,
            headers={**headers, "content-encoding": self.coding},
            content=packed,
            extensions=request.extensions,
        )
        return super().handle_request(sent)


def _client(url: str, coding: str) -> openai.OpenAI:
    http = httpx.Client(transport=_Compressing(coding))
    return openai.OpenAI(base_url=url, api_key="sk-test-client", max_retries=0, http_client=http)


def test_a_gzip_or_deflate_chat_is_decoded(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path, records: Records
) -> None:
    proxy = start_proxy(write_config(tmp_path / "c.json", fake_upstream.url))
    for coding in ("gzip", "deflate"):
        reply = _client(proxy.url, coding).chat.completions.create(
            model="gpt-fake", messages=[{"role": "user", "content": f"hello in {coding}"}]
        )
        assert reply.choices[0].message.content
        sent = fake_upstream.requests[-1]
        assert sent.json["messages"][-1]["content"] == f"hello in {coding}"
        assert "content-encoding" not in sent.headers
    lines = records.access(2)
    assert [line["content_encoding"] for line in lines] == ["gzip", "deflate"]
    assert [line["status"] for line in lines] == [200, 200]


def test_a_body_that_decodes_past_the_limit_is_the_413(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path, records: Records
) -> None:
    proxy = start_proxy(write_config(tmp_path / "c.json", fake_upstream.url), max_body_bytes=4096)
    pad = " " * 3_000_000
    with pytest.raises(openai.APIStatusError) as refused:
        _client(proxy.url, "gzip").chat.completions.create(
            model="gpt-fake", messages=[], extra_body={"pad": pad}
        )
    assert len(gzip.compress(pad.encode())) < 4096  # sent under the limit; decoded, past it
    assert refused.value.status_code == 413
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "payload_too_large"
    assert "decodes (gzip) past the limit of 4096 bytes" in error["message"]
    [line] = records.access(1)
    assert line["status"] == 413 and line["content_encoding"] == "gzip"
    assert fake_upstream.requests == []


def test_a_coding_the_proxy_does_not_decode_is_the_415_naming_it(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path, records: Records
) -> None:
    proxy = start_proxy(write_config(tmp_path / "c.json", fake_upstream.url))
    with pytest.raises(openai.APIStatusError) as refused:
        _client(proxy.url, "br").chat.completions.create(
            model="gpt-fake", messages=[{"role": "user", "content": "hi"}]
        )
    assert refused.value.status_code == 415
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "unsupported_content_encoding"
    assert error["type"] == "invalid_request_error"
    assert "'br'" in error["message"] and "gzip or deflate" in error["message"]
    with httpx.Client(base_url=proxy.origin) as http:
        broken = http.post(
            "/v1/chat/completions",
            content=b"not gzip at all",
            headers={"content-encoding": "gzip", "authorization": "Bearer sk-test-client"},
        )
    assert broken.status_code == 400 and "not valid gzip" in broken.json()["error"]["message"]
    lines = records.access(2)
    assert [(line["status"], line["content_encoding"]) for line in lines] == [
        (415, "br"),
        (400, "gzip"),
    ]
    assert fake_upstream.requests == []


def test_the_session_and_memory_apis_bound_the_decoded_body(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Their 64 KiB is counted on the decoded bytes too, whatever the body sent weighs."""
    proxy = start_proxy(write_config(tmp_path / "c.json", fake_upstream.url))
    packed = gzip.compress(b'{"content": "' + b"a" * (80 << 10) + b'"}')
    assert len(packed) < 4096
    headers = {"content-encoding": "gzip", "authorization": "Bearer sk-test-client"}
    with httpx.Client(base_url=proxy.origin) as http:
        for path in ("/v1/memory", "/v1/sessions/s-1/branch"):
            answer = http.post(path, content=packed, headers=headers)
            assert answer.status_code == 413, (path, answer.text)
            assert (
                "decodes (gzip) past the limit of 65536 bytes" in answer.json()["error"]["message"]
            )


def test_a_chunked_gzip_body_is_counted_as_sent_and_decoded(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A body sent in chunks (no Content-Length): its bytes as sent are bounded as they
    come, its decoded bytes as they decode, the same limit."""
    proxy = start_proxy(write_config(tmp_path / "c.json", fake_upstream.url), max_body_bytes=4096)
    chat = b'{"model": "gpt-fake", "messages": [{"role": "user", "content": "chunked"}]}'
    bomb = gzip.compress(chat[:-1] + b', "pad": "' + b" " * 100_000 + b'"}')
    headers = {"content-encoding": "gzip", "authorization": "Bearer sk-test-client"}
    with httpx.Client(base_url=proxy.origin) as http:
        for body, status in ((gzip.compress(chat), 200), (bomb, 413)):
            sent = http.post(
                "/v1/chat/completions", content=iter([body[:10], body[10:]]), headers=headers
            )
            assert sent.status_code == status, sent.text
    assert fake_upstream.requests[-1].json["messages"][-1]["content"] == "chunked"
