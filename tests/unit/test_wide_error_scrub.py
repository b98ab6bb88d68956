"""A provider's error in UTF-16 or UTF-32 JSON (with its byte-order mark or without, as a
client's JSON parser reads either) is scrubbed of the key the call sent, as text: its bytes
spell the key two or four bytes a character, which the bytes' scrub does not look for."""

from __future__ import annotations

import codecs
import json

import httpx
import pytest

from proxy.answers import scrubbed

KEY = "sk-wide-client-0123456789"
_REQUEST = httpx.Request("POST", "http://llm.test/v1/chat/completions")
_REQUEST.headers["authorization"] = f"Bearer {KEY}"
_ERROR = {"error": {"message": f"Incorrect API key provided: {KEY}.", "code": "invalid_api_key"}}


@pytest.mark.parametrize(
    ("bom", "encoding"),
    [
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (b"", "utf-16-le"),
        (b"", "utf-16-be"),
        (codecs.BOM_UTF32_LE, "utf-32-le"),
        (b"", "utf-32-be"),
    ],
)
def test_a_wide_json_error_is_scrubbed_and_keeps_its_encoding(bom: bytes, encoding: str) -> None:
    body = bom + json.dumps(_ERROR).encode(encoding)
    out = scrubbed(401, body, _REQUEST)
    assert out.startswith(bom)
    read = json.loads(out)  # as a client's parser reads it, by its BOM or its zero bytes
    assert read["error"]["message"] == "Incorrect API key provided: [REDACTED]."
    escaped = json.dumps(_ERROR).replace("-", "\\u002d").encode(encoding)  # a writer's escapes
    assert KEY not in json.loads(scrubbed(401, escaped, _REQUEST))["error"]["message"]


def test_a_wide_body_without_the_key_passes_as_it_came() -> None:
    body = codecs.BOM_UTF16_BE + json.dumps({"error": {"message": "busy"}}).encode("utf-16-be")
    assert scrubbed(503, body, _REQUEST) is body
    success = json.dumps(_ERROR).encode("utf-16")  # a success is never scrubbed
    assert scrubbed(200, success, _REQUEST) is success


@pytest.mark.parametrize(
    "head",
    [b"\x00", b"x\x00", b"\x00\x00\x00", b"\xff\xfe", b"\xff\xfe\x00\x00", b"\xfe\xff\x00"],
)
@pytest.mark.parametrize("tail", [b"", b"!"])  # an even and an odd length
def test_a_utf8_body_that_merely_reads_wide_is_scrubbed(head: bytes, tail: bytes) -> None:
    """A body whose first bytes read as a wide one's (a zero byte among its first two, or
    a byte-order mark's bytes) but whose key is spelled in UTF-8 (binary framing, a stray
    NUL) is scrubbed of it all the same: the wide reading is tried beside the bytes', never
    in place of them, so a body that does not decode wide, or spells no key so, keeps none."""
    body = head + f"Incorrect API key provided: {KEY}.".encode() + tail
    out = scrubbed(401, body, _REQUEST)
    assert KEY.encode() not in out and b"[REDACTED]" in out
