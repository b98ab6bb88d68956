"""Answers a provider compresses although the proxy asked for identity: each coding httpx
decodes reaches the openai SDK decoded and without ``content-encoding``, whole and streamed, over
both transports; a stream is decoded as it arrives, never held back; any other coding is a 502
naming it. The provider is the loopback fake, sending the compressed bytes it is given."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import brotli
import httpx
import openai
import pytest
import zstandard

from tests.fakes.replies import Pacer, raw
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, StartProxy, write_config

_COMPLETION = {
    "id": "chatcmpl-z",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-fake",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "squeezed answer"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}
_HI = [{"role": "user", "content": "hi"}]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    body = {
        "id": "chatcmpl-z",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


_EVENTS = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"content": "squeezed "}),
    _chunk({"content": "stream"}),
    _chunk({}, "stop"),
    "data: [DONE]\n\n",
]


@dataclass(frozen=True, slots=True)
class _Compressor:
    """One compressed body written piece by piece: ``piece`` returns the bytes of ``data``
    flushed, so a decoder given them can return all of ``data``; ``end`` closes the body."""

    piece: Callable[[bytes], bytes]
    end: Callable[[], bytes]


def _zlib(wbits: int) -> _Compressor:
    c = zlib.compressobj(wbits=wbits)
    return _Compressor(lambda d: c.compress(d) + c.flush(zlib.Z_SYNC_FLUSH), c.flush)


def _brotli() -> _Compressor:
    c = brotli.Compressor()
    return _Compressor(lambda d: c.process(d) + c.flush(), c.finish)


def _zstd() -> _Compressor:
    c = zstandard.ZstdCompressor().compressobj()
    block = zstandard.COMPRESSOBJ_FLUSH_BLOCK
    return _Compressor(lambda d: c.compress(d) + c.flush(block), c.flush)


_COMPRESSORS: dict[str, Callable[[], _Compressor]] = {
    "gzip": lambda: _zlib(zlib.MAX_WBITS | 16),
    "deflate": lambda: _zlib(zlib.MAX_WBITS),  # zlib-wrapped, as RFC 9110 defines it
    "br": _brotli,
    "zstd": _zstd,
}
ENCODINGS = sorted(_COMPRESSORS)
KINDS = ["aiohttp", "httpx"]


def _compressed(encoding: str, text: bytes) -> bytes:
    c = _COMPRESSORS[encoding]()
    return c.piece(text) + c.end()


def _stream_pieces(encoding: str) -> list[bytes]:
    """The events compressed as one body, each flushed, cut so that every piece ends inside
    a block: the decoder is handed partial input, and an event becomes whole only with the
    piece after the one it starts in."""
    c = _COMPRESSORS[encoding]()
    flushed = [c.piece(event.encode()) for event in _EVENTS] + [c.end()]
    pieces, carry = [], b""
    for block in flushed:
        half = max(1, len(block) // 2)
        pieces.append(carry + block[:half])
        carry = block[half:]
    return [*pieces, carry] if carry else pieces


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No egress proxy of the machine's is used to reach the loopback provider."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def start(start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path) -> Any:
    """Start a proxy over the transport ``kind``, its provider the fake; no tiktoken."""

    def run(kind: str) -> ProxyServer:
        config = write_config(tmp_path / f"{kind}.json", fake_upstream.url)
        return start_proxy(config, tokenizer="", http_transport=kind)

    return run


def _sdk(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url, api_key="sk-test-client", max_retries=0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_compressed_answer_is_relayed_decoded(
    encoding: str, kind: str, start: Any, fake_upstream: FakeUpstream
) -> None:
    squeezed = _compressed(encoding, json.dumps(_COMPLETION).encode())
    headers = {"content-type": "application/json", "content-encoding": encoding}
    fake_upstream.script(raw(squeezed, headers=headers))

    resp = _sdk(start(kind)).chat.completions.with_raw_response.create(
        model="gpt-fake", messages=_HI
    )

    assert resp.parse().choices[0].message.content == "squeezed answer"
    assert "content-encoding" not in resp.headers
    assert int(resp.headers["content-length"]) == len(resp.content)
    assert fake_upstream.requests[0].headers["accept-encoding"] == "identity"  # asked not to


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_compressed_stream_is_relayed_decoded_as_it_arrives(
    encoding: str, kind: str, start: Any, fake_upstream: FakeUpstream
) -> None:
    headers = {"content-type": "text/event-stream", "content-encoding": encoding}
    pieces = _stream_pieces(encoding)
    pacer = Pacer()
    fake_upstream.script(raw(*pieces, headers=headers, pacer=pacer))

    words: list[str] = []
    with _sdk(start(kind)).chat.completions.with_streaming_response.create(
        model="gpt-fake", messages=_HI, stream=True
    ) as resp:
        assert "content-encoding" not in resp.headers
        # The provider holds the rest back until the client has its first event, which the
        # second piece completes: a proxy that decoded the body only at its end would get no
        # further than that piece, and the stream would end there.
        pacer.allow()
        for chunk in resp.parse():
            pacer.allow(len(pieces))
            if chunk.choices and chunk.choices[0].delta.content:
                words.append(chunk.choices[0].delta.content)

    assert "".join(words) == "squeezed stream"
    assert not pacer.expired


def _post(proxy: ProxyServer, *, stream: bool) -> httpx.Response:
    """A chat request read whole by plain httpx: the bytes and headers as relayed."""
    with httpx.Client(base_url=proxy.origin, trust_env=False, timeout=20) as http:
        return http.post(
            "/v1/chat/completions",
            headers={"x-session-id": f"undecodable-{stream}"},
            json={"model": "gpt-fake", "stream": stream, "messages": _HI},
        )


@pytest.mark.parametrize("encoding", ["compress", "x-squash", "gzip, compress"])
def test_an_answer_in_a_coding_nobody_decodes_is_a_clear_502(
    encoding: str, proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # Relayed, its bytes would reach the client without the header that says what they are
    # (and crash an SDK reading the stream): the 502 says which encoding instead.
    headers = {"content-type": "text/event-stream", "content-encoding": encoding}
    fake_upstream.script(raw(b"\x1f\x9d\x90", headers=headers), raw(b"\x1f\x9d", headers=headers))
    for resp in (_post(proxy, stream=False), _post(proxy, stream=True)):
        assert resp.status_code == 502, resp.text
        message = resp.json()["error"]["message"]
        assert f"compressed as {encoding!r}, which the proxy cannot decode" in message
        assert "send one of br, deflate, gzip, identity, zstd" in message
