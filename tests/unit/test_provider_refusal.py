"""A provider's 401 rewritten as an OpenAI-shaped one (``proxy/provider_refusal.py``): the
words it quotes are the provider's as a client reads them, parsed, so the credential the
call sent is scrubbed from them as parsed too, and the message names the credential that
went."""

from __future__ import annotations

import base64

import httpx

from proxy.answers import Answer
from proxy.config import ProviderConfig
from proxy.provider_refusal import relayed

KEY = "sk-client-0123456789+abc/def=="
_PLAIN = ProviderConfig(base_url="http://llm.test/v1", name="llm")


def _answer(body: bytes, authorization: str, provider: ProviderConfig = _PLAIN) -> Answer:
    request = httpx.Request("POST", f"{provider.base_url}/chat/completions")
    request.headers["authorization"] = authorization
    return Answer(401, httpx.Headers({"content-type": "application/json"}), body, request)


def _relayed(raw: bytes, authorization: str, provider: ProviderConfig = _PLAIN) -> str:
    answer = _answer(raw, authorization, provider)
    body, _ = relayed(provider, answer, answer.content, {})
    return body.decode()


def test_a_key_the_provider_wrote_with_escapes_is_not_quoted_back_decoded() -> None:
    """A JSON writer may escape any character (.NET's escapes ``+`` as ``\\u002B``, some
    escape ``/``, ``-`` or every one): the bytes hold no spelling of the key, the parsed
    message does, and the rewrite writes it out plain."""
    escaped = "".join(f"\\u{ord(c):04X}" if c in "+-/" else c for c in KEY)
    for field in ("message", "code", "param", "type"):
        raw = b'{"error": {"%s": "Incorrect API key provided: %s."}}' % (
            field.encode(),
            escaped.encode(),
        )
        out = _relayed(raw, f"Bearer {KEY}")
        assert KEY not in out, (field, out)
        assert "[REDACTED]" in out, (field, out)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_a_basic_header_is_named_the_base_urls_only_when_it_is_that_one() -> None:
    """``Upstream`` adds the baseUrl's user and password only to a call that carries no
    ``Authorization``: a client's own Basic header goes instead, and is the one refused."""
    at = ProviderConfig(base_url="http://svc:p%40ss@llm.test/v1", name="llm")
    ours = _relayed(b"", _basic("svc", "p@ss"), at)
    assert "the user and password in its baseUrl" in ours, ours
    theirs = _relayed(b"", _basic("someone", "else-entirely"), at)
    assert "the key the client sent" in theirs, theirs


def test_a_call_without_a_key_does_not_say_the_clients_was_held_back() -> None:
    """Without proxy keys the client's ``Authorization`` is forwarded: a call that carried
    none is one the client sent none with, which the message must not deny."""
    request = httpx.Request("POST", "http://llm.test/v1/chat/completions")
    answer = Answer(401, httpx.Headers(), b"", request)
    body, _ = relayed(_PLAIN, answer, answer.content, {})
    assert "no key" in body.decode() and "not forwarded" not in body.decode(), body


def test_a_key_the_client_sent_in_the_query_is_named_as_its_key() -> None:
    """A client's query goes upstream, a key in it (``?key=``, as some providers take one)
    with it: that is the key refused, not "no key"."""
    request = httpx.Request("POST", "http://llm.test/v1/chat/completions?key=AIza0123456789")
    answer = Answer(401, httpx.Headers(), b"", request)
    body = relayed(_PLAIN, answer, answer.content, {})[0].decode()
    assert "the key the client sent in the query" in body and "no key" not in body, body
    assert "AIza0123456789" not in body
