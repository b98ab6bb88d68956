"""``body_coding`` and ``read_body`` against a hostile client: a body of many tiny gzip
members, codings stacked deep, data after a deflate stream's end, a ``Content-Encoding``
holding words, the header sent twice, and a bomb decoded off the event loop."""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from typing import Any

import pytest
from starlette.requests import Request

from proxy.api import deps
from proxy.api.body_coding import codings, decoded, shown
from proxy.api.deps import read_body
from proxy.errors import ClientRequestError, UnsupportedMediaType

BODY = b'{"messages": [{"role": "user", "content": "hi"}]}'


def _request(body: bytes, headers: list[tuple[bytes, bytes]]) -> Request:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers, "query_string": b""}
    return Request(scope, receive)


def test_many_tiny_gzip_members_are_refused_at_once() -> None:
    """Each member of a ``gzip`` body costs a decoder and a copy of what follows it: a body
    of tens of thousands of empty members would hold the event loop for seconds."""
    members = gzip.compress(b"") * 100_000  # 2 MB, decoding to nothing
    started = time.perf_counter()
    with pytest.raises(ClientRequestError) as refused:
        decoded(members, ["gzip"], 32 << 20)
    assert time.perf_counter() - started < 0.5
    assert refused.value.status_code == 400 and "members" in refused.value.message


def test_a_few_large_members_decode_whole() -> None:
    parts = [bytes([65 + i]) * 300_000 for i in range(5)]
    sent = b"".join(gzip.compress(p, 0) for p in parts)  # stored: no smaller than sent
    assert decoded(sent, ["gzip"], 2 << 20) == b"".join(parts)


def test_codings_stacked_past_a_few_are_the_415() -> None:
    assert codings("gzip, gzip, deflate, gzip") == ["gzip", "gzip", "deflate", "gzip"]
    with pytest.raises(UnsupportedMediaType):
        codings(", ".join(["gzip"] * 5))


def test_data_after_a_deflate_stream_is_the_400() -> None:
    with pytest.raises(ClientRequestError) as refused:
        decoded(zlib.compress(BODY) + b"trailing", ["deflate"], 1 << 20)
    assert refused.value.status_code == 400 and "not valid deflate" in refused.value.message


def test_only_content_codings_are_quoted() -> None:
    """A token-shaped header (a key, a name) is no coding: not quoted in a log line."""
    assert shown("GZIP") == "gzip" and shown("deflate ,  gzip") == "deflate, gzip"
    assert shown("br") == "br" and shown("x-gzip, identity") == "x-gzip, identity"
    assert shown("sk-live-0123456789abcdef") == "unreadable"
    assert shown("gzip, alice.smith") == "unreadable" and shown("") == "unreadable"


async def test_a_header_sent_twice_names_both_codings() -> None:
    """Two ``Content-Encoding`` lines are one list (RFC 9110 5.3): both are undone."""
    twice = [(b"content-encoding", b"gzip"), (b"content-encoding", b"gzip")]
    got = await read_body(_request(gzip.compress(gzip.compress(BODY)), twice), 1 << 20)
    assert got == BODY


async def test_a_body_is_decoded_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decoding up to a chat's limit takes a CPU's while (docs/perf.md): not on the loop,
    which would answer no other request meanwhile."""
    threads: list[str] = []

    def decoding(*args: Any, **kwargs: Any) -> bytes:
        threads.append(threading.current_thread().name)
        return decoded(*args, **kwargs)

    monkeypatch.setattr(deps, "decoded", decoding)
    sent = _request(gzip.compress(BODY), [(b"content-encoding", b"gzip")])
    assert await deps.read_body(sent, 1 << 20) == BODY
    assert threads and threads[0] != threading.main_thread().name
