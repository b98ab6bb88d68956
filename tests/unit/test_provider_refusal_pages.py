"""What the OpenAI-shaped error of a provider answer that is no JSON says of its body
(``proxy/provider_refusal.py``): a page is named by its title, read as a browser shows it
and scrubbed so, and reading it costs little whatever the body holds, since the rewrite runs
on the event loop every request shares."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from proxy import provider_refusal
from proxy.answers import Answer
from proxy.config import ProviderConfig
from proxy.jsonio import loads_json
from proxy.provider_refusal import relayed
from tests.unit.linear import assert_linear

_PLAIN = ProviderConfig(base_url="http://llm.test/v1", name="llm")
KEY = "sk-client-0123456789+abc/def=="


def _message(status: int, body: bytes, authorization: str | None = None) -> str:
    request = httpx.Request("POST", "http://llm.test/v1/chat/completions")
    if authorization is not None:
        request.headers["authorization"] = authorization
    answer = Answer(status, httpx.Headers({"content-type": "text/html"}), body, request)
    out, _ = relayed(_PLAIN, answer, answer.content, {"content-type": "text/html"})
    message: str = json.loads(out)["error"]["message"]
    return message


def test_a_body_of_unclosed_tags_is_read_in_linear_time() -> None:
    """A title search that scans to the body's end from each ``<title`` took quadratic time:
    a 70 KB error body held the event loop for seconds, a 32 MiB one for days."""
    for unit in ("<title>", "<title ", "<title>x"):
        assert "an HTML page" in _message(502, unit.encode() * 10_000)
        assert_linear(lambda n, u=unit: u * n, 10_000, read=lambda t: _message(502, t.encode()))


def test_a_huge_body_is_read_only_as_far_as_its_words_are_quoted() -> None:
    started = time.perf_counter()
    message = _message(503, b"overloaded " * (3 << 20))
    assert time.perf_counter() - started < 0.5
    assert message.endswith(" overloaded ov…") and len(message) < 400, message


def test_a_title_is_read_as_a_browser_shows_it_and_scrubbed_so() -> None:
    """A title's character references are what a reader of it sees: one spelling the key
    sent (``&#43;`` for ``+``) is that key, which the scrub of the body's bytes missed."""
    spelled = KEY.replace("+", "&#43;").replace("/", "&#x2F;").replace("=", "&equals;")
    page = b"<html><title>Caf&eacute; &amp; key %s refused</title></html>" % spelled.encode()
    message = _message(403, page, f"Bearer {KEY}")
    assert "titled 'Café & key [REDACTED] refused'" in message, message


PAGES = [  # pages of markup that do not begin with "<": none is quoted as plain text
    b"\xef\xbb\xbf<html><body>Blocked: your IP 203.0.113.9</body></html>",  # a UTF-8 BOM
    b"403 Forbidden\n<html><body>Blocked: your IP 203.0.113.9</body></html>",
]


def test_a_page_that_does_not_begin_with_a_tag_is_still_no_plain_text() -> None:
    for page in PAGES:
        for status in (403, 502):
            message = _message(status, page)
            assert "203.0.113.9" not in message and message.endswith("an HTML page"), message


def test_control_characters_of_a_quoted_body_are_not_sent_on() -> None:
    """A terminal that prints the SDK's message would act on an escape sequence in it."""
    message = _message(503, b"\x1b[2J\x1b]0;owned\x07overloaded\x00")
    assert message.endswith(": \ufffd[2J\ufffd]0;owned\ufffdoverloaded\ufffd"), repr(message)
    said = b'{"error": {"message": "denied\\u001b[2J\\r\\nretry\\u202e"}}'
    assert _message(403, said).endswith(": denied\ufffd[2J\ufffd\nretry\ufffd"), said


def _parsed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the texts the module parses as JSON from now on: a check that a body is
    not parsed that no loaded machine's slowness breaks, as a bound on seconds would."""
    sizes: list[int] = []

    def recorded(text: str | bytes) -> object:
        sizes.append(len(text))
        return loads_json(text)

    monkeypatch.setattr(provider_refusal, "loads_json", recorded)
    return sizes


def test_a_huge_json_error_passes_as_it_came_unparsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether an error is JSON decides only whether it is rewritten: parsing a body of
    megabytes of numbers (up to the answer's cap, 256 MiB for embeddings) held the event loop
    for seconds to learn what its first byte says."""
    body = json.dumps({"error": {"message": "x", "data": [1.5] * (2 << 20)}}).encode()
    request = httpx.Request("POST", "http://llm.test/v1/embeddings")
    answer = Answer(500, httpx.Headers({"content-type": "application/json"}), body, request)
    parsed = _parsed(monkeypatch)
    out, _ = relayed(_PLAIN, answer, body, {})
    assert all(size < 1 << 16 for size in parsed), parsed
    assert out is body


def test_a_huge_json_refusal_is_not_parsed_for_its_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = json.dumps({"error": {"message": "no", "data": [1.5] * (2 << 20)}}).encode()
    parsed = _parsed(monkeypatch)
    message = _message(403, body)
    assert all(size < 1 << 16 for size in parsed), parsed
    assert message.endswith("…") and len(message) < 500, message


def test_a_page_a_gateway_wrapped_in_its_json_error_is_named_by_its_title() -> None:
    """A gateway in front of the provider (LiteLLM's, an API manager) may put the page it got
    into its own JSON error's message: that message is a page, quoted no more than one."""
    page = b"<!DOCTYPE html><html><head><title>Access denied</title></head><body>"
    page += b"<p>" + b"Blocked by the firewall. Your IP: 203.0.113.9</p>"
    for said in ({"error": {"message": page.decode()}}, {"detail": "403: " + page.decode()}):
        message = _message(403, json.dumps(said).encode())
        assert message.endswith(": an HTML page titled 'Access denied'"), message
        assert "203.0.113.9" not in message


def _charset_message(body: bytes, content_type: str) -> str:
    request = httpx.Request("POST", "http://llm.test/v1/chat/completions")
    request.headers["authorization"] = f"Bearer {KEY}"
    answer = Answer(503, httpx.Headers({"content-type": content_type}), body, request)
    out, _ = relayed(_PLAIN, answer, answer.content, {"content-type": content_type})
    message: str = json.loads(out)["error"]["message"]
    return message


def test_a_body_in_another_charset_is_read_in_it_and_scrubbed_as_read() -> None:
    """The bytes' scrub looks for the key as UTF-8 spells it: in a UTF-16 body each of its
    characters went out between two others, for a reader to put back together."""
    said = f"Dienst nicht verfügbar für {KEY}"
    latin = _charset_message(
        said.replace(KEY, "x").encode("latin-1"), "text/plain; charset=iso-8859-1"
    )
    assert latin.endswith(": Dienst nicht verfügbar für x"), latin
    wide = _charset_message(said.encode("utf-16"), "text/plain; charset=utf-16")
    assert wide.endswith(": Dienst nicht verfügbar für [REDACTED]"), wide


def test_a_json_message_that_only_begins_with_a_bracket_is_quoted() -> None:
    said = b'{"error": {"message": "<gpt-4o> is not allowed for this key"}}'
    assert _message(403, said).endswith(": <gpt-4o> is not allowed for this key")
