"""``body_coding``: a request body's ``Content-Encoding`` undone, bounded by the body's
limit as it decodes, or refused naming the coding."""

from __future__ import annotations

import gzip
import zlib

import pytest

from proxy.api.body_coding import codings, decoded, shown
from proxy.errors import ClientRequestError, PayloadTooLarge, UnsupportedMediaType

BODY = b'{"messages": [{"role": "user", "content": "hi"}]}'


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def test_the_codings_taken_and_their_order() -> None:
    assert codings(None) == [] and codings("identity") == []
    assert codings("x-gzip") == ["gzip"]
    assert codings("deflate, GZIP") == ["deflate", "gzip"]
    with pytest.raises(UnsupportedMediaType) as refused:
        codings("gzip, br")
    assert refused.value.status_code == 415 and "'br'" in refused.value.message
    with pytest.raises(UnsupportedMediaType) as odd:
        codings("gzip, a coding\x7f of words")
    assert "'unreadable'" in odd.value.message and "words" not in odd.value.message


def test_a_header_is_quoted_only_when_it_reads_as_codings() -> None:
    assert shown("gzip") == "gzip" and shown("deflate, gzip") == "deflate, gzip"
    assert shown("x" * 41) == "unreadable" and shown("my secret words") == "unreadable"


@pytest.mark.parametrize(
    ("sent", "applied"),
    [
        (gzip.compress(BODY), ["gzip"]),
        (gzip.compress(BODY[:10]) + gzip.compress(BODY[10:]), ["gzip"]),  # two members
        (zlib.compress(BODY), ["deflate"]),
        (_raw_deflate(BODY), ["deflate"]),  # without zlib's header, as some clients send
        (gzip.compress(zlib.compress(BODY)), ["deflate", "gzip"]),
    ],
    ids=["gzip", "gzip-members", "deflate", "raw-deflate", "deflate-gzip"],
)
def test_a_body_is_decoded_whole(sent: bytes, applied: list[str]) -> None:
    assert decoded(sent, applied, 1024) == BODY


def test_a_body_decoding_past_the_limit_is_the_413_and_is_not_held() -> None:
    bomb = gzip.compress(b"0" * 50_000_000)
    assert len(bomb) < 100_000
    with pytest.raises(PayloadTooLarge) as refused:
        decoded(bomb, ["gzip"], 1 << 20, " (CASCADE_MAX_BODY_BYTES)")
    assert "decodes (gzip) past the limit of 1048576 bytes (CASCADE_MAX_BODY_BYTES)" in str(
        refused.value
    )
    assert decoded(gzip.compress(BODY), ["gzip"], len(BODY)) == BODY  # at the limit: whole
    with pytest.raises(PayloadTooLarge):
        decoded(gzip.compress(BODY), ["gzip"], len(BODY) - 1)


@pytest.mark.parametrize(
    "sent",
    [b"not gzip", gzip.compress(BODY)[:-12], gzip.compress(BODY) + b"x"],
    ids=["not-gzip", "cut-short", "trailing-byte"],
)
def test_a_body_that_does_not_decode_is_the_400(sent: bytes) -> None:
    with pytest.raises(ClientRequestError) as refused:
        decoded(sent, ["gzip"], 1 << 20)
    assert refused.value.status_code == 400 and "not valid gzip" in refused.value.message


def _raw_deflate_like_zlib(data: bytes) -> bytes:
    """A raw deflate stream whose first two bytes pass zlib's header check: a stored block
    of one byte (``0x78``: not final, stored, padding bits set; length ``0x0001``), then
    the rest as a raw stream. Read as zlib's, ``78 01`` is a header and what follows is no
    valid deflate."""
    head = bytes([0x78, 0x01, 0x00, 0xFE, 0xFF]) + data[:1]
    assert (head[0] << 8 | head[1]) % 31 == 0 and head[0] & 0x0F == 8
    return head + _raw_deflate(data[1:])


def test_a_raw_deflate_stream_that_looks_like_zlib_is_decoded_whole() -> None:
    sent = _raw_deflate_like_zlib(BODY)
    assert zlib.decompress(sent, -zlib.MAX_WBITS) == BODY  # a raw stream, as built
    with pytest.raises(zlib.error):
        zlib.decompress(sent)  # and no zlib stream, though its header checks
    assert decoded(sent, ["deflate"], 1024) == BODY
    assert decoded(zlib.compress(BODY), ["deflate"], 1024) == BODY  # zlib's still zlib's
    with pytest.raises(PayloadTooLarge):  # the retry is bounded as the first pass is
        decoded(sent, ["deflate"], len(BODY) - 1)
    with pytest.raises(ClientRequestError) as bad:  # neither form: the zlib error, named
        decoded(sent[:-3], ["deflate"], 1024)
    assert "not valid deflate" in bad.value.message


def test_a_raw_deflate_bomb_that_looks_like_zlib_is_the_413_within_the_limit() -> None:
    """A bomb (a megabyte of zeros per kilobyte sent) as a raw stream behind zlib's
    looking header: the zlib pass fails at once, the raw pass stops one byte past the limit."""
    sent = _raw_deflate_like_zlib(b"{" + bytes(8 << 20))
    assert len(sent) < 16 << 10
    with pytest.raises(PayloadTooLarge) as refused:
        decoded(sent, ["deflate"], 1 << 20)
    assert "past the limit of 1048576 bytes" in refused.value.message
