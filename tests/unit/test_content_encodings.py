"""proxy.upstream's list of the content codings httpx decodes, checked against httpx itself:
a coding it names must come out of httpx decoded, and httpx must decode nothing it leaves out
(which would be refused with a 502 although it could be relayed)."""

from __future__ import annotations

import gzip
import zlib

import brotli
import httpx
import pytest
import zstandard

from proxy.upstream import DECODED_ENCODINGS, _decodable

_TEXT = b'{"choices": [{"message": {"content": "squeezed answer"}}]}'
_COMPRESSED = {
    "identity": _TEXT,
    "gzip": gzip.compress(_TEXT),
    "deflate": zlib.compress(_TEXT),
    "br": brotli.compress(_TEXT),
    "zstd": zstandard.ZstdCompressor().compress(_TEXT),
}


def test_the_list_is_httpx_s_own() -> None:
    # httpx's list is private; read here only, so a release that changes it (or a missing
    # brotli / zstandard install, which drops br / zstd from it) fails this test, not a call.
    from httpx._decoders import SUPPORTED_DECODERS

    assert set(SUPPORTED_DECODERS) == DECODED_ENCODINGS


@pytest.mark.parametrize("encoding", sorted(DECODED_ENCODINGS))
def test_httpx_decodes_each_coding_named(encoding: str) -> None:
    body = _COMPRESSED[encoding]
    resp = httpx.Response(200, headers={"content-encoding": encoding}, content=body)
    assert resp.read() == _TEXT


@pytest.mark.parametrize(
    ("value", "decodable"),
    [
        ("gzip", True),
        ("BR", True),
        (" zstd ", True),
        ("deflate, br", True),  # applied in order, undone in reverse
        ("identity", True),
        ("compress", False),  # LZW: httpx has no decoder for it
        ("x-gzip", False),  # not an alias httpx knows
        ("gzip, compress", False),  # one undecodable coding is enough
        ("lz4", False),
    ],
)
def test_a_content_encoding_value_is_decodable_when_every_coding_is(
    value: str, decodable: bool
) -> None:
    assert _decodable(value) is decodable
