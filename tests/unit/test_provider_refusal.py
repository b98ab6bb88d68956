"""A provider's 401 rewritten as an OpenAI-shaped one (``proxy/provider_refusal.py``): the
words it quotes are the provider's as a client reads them, parsed, so the credential the
call sent is scrubbed from them as parsed too, and the message names the credential that
went."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

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


def _refusal(
    status: int, body: bytes, url: str, authorization: str | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    request = httpx.Request("POST", url)
    if authorization is not None:
        request.headers["authorization"] = authorization
    answer = Answer(status, httpx.Headers({"content-type": "text/html"}), body, request)
    out, headers = relayed(_PLAIN, answer, answer.content, {"content-type": "text/html"})
    assert headers["content-type"] == "application/json"
    error = json.loads(out)["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    return error, headers


_CLOUDFLARE = b"""<!DOCTYPE html><html><head><title>Attention Required! | Cloudflare</title>
</head><body><h1>Sorry, you have been blocked</h1><span>Your IP: 203.0.113.9</span>
<span>Cloudflare Ray ID: 8a1b2c3d4e5f</span></body></html>"""
FORBIDDEN = {  # what a provider, Azure or a firewall in front of one answers 403 with
    "cloudflare": (_CLOUDFLARE, "an HTML page titled 'Attention Required! | Cloudflare'"),
    "azure": (
        b'{"error": {"code": "PermissionDenied", "message": "Principal does not have access '
        b'to API/Operation."}}',
        "Principal does not have access to API/Operation.",
    ),
    "apim": (
        b'{"statusCode": 403, "message": "Out of call volume quota."}',
        "Out of call volume quota.",
    ),
    "aws": (
        b'{"Message": "User: anonymous is not authorized to perform: execute-api:Invoke"}',
        "User: anonymous is not authorized to perform: execute-api:Invoke",
    ),
    "lambda": (b'{"errorMessage": "Unauthorized", "errorType": "Error"}', "Unauthorized"),
    "empty": (b"", "no body"),
}


@pytest.mark.parametrize("case", list(FORBIDDEN))
def test_a_403_is_openai_shaped_and_quotes_no_page(case: str) -> None:
    """An SDK quotes a 403's whole body as its message when it is not JSON: a firewall's
    page, the proxy's address in it, reached every client. The status stays 403."""
    body, said = FORBIDDEN[case]
    error, _ = _refusal(403, body, "http://llm.test/v1/chat/completions", f"Bearer {KEY}")
    assert error["message"].startswith("the provider 'llm' at http://llm.test answered 403 to ")
    assert error["message"].endswith(f": {said}"), error
    assert "203.0.113.9" not in error["message"] and "<" not in error["message"]
    code = "PermissionDenied" if case == "azure" else "provider_forbidden"
    assert (error["type"], error["code"]) == ("request_forbidden", code)


def test_an_html_title_is_scrubbed_of_the_key_sent() -> None:
    page = b"<html><title>Key %s refused</title></html>" % KEY.encode()
    error, _ = _refusal(403, page, "http://llm.test/v1/chat/completions", f"Bearer {KEY}")
    assert KEY not in error["message"] and "Key [REDACTED] refused" in error["message"]


def test_another_errors_json_passes_as_it_came_and_any_success() -> None:
    request = httpx.Request("POST", "http://llm.test/v1/chat/completions")
    deep = b"[" * 100_000 + b"]" * 100_000  # JSON past the parser's depth is JSON still
    for status, body in ((404, b'{"detail": "x"}'), (500, deep), (200, b"<html>fine</html>")):
        answer = Answer(status, httpx.Headers(), body, request)
        assert relayed(_PLAIN, answer, body, {"retry-after": "3"}) == (body, {"retry-after": "3"})


NOT_JSON = {  # what a gateway in front of a provider answers an error with
    (502, b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"): (
        "an HTML page titled '502 Bad Gateway'"
    ),
    (503, b"upstream connect error or disconnect/reset before headers"): (
        "upstream connect error or disconnect/reset before headers"
    ),
    (408, b""): "no body",
    (409, b"<html>Conflict</html>"): "an HTML page",
}


@pytest.mark.parametrize(("status", "body"), list(NOT_JSON))
def test_an_error_whose_body_is_no_json_is_openai_shaped_and_keeps_its_status(
    status: int, body: bytes
) -> None:
    """The SDK says only ``Error code: 502`` for an HTML 502 (1.x quoted the page whole),
    which does not tell the provider's gateway from the proxy's own 502."""
    request = httpx.Request("POST", "http://llm.test/v1/chat/completions")
    answer = Answer(status, httpx.Headers({"content-type": "text/html"}), body, request)
    headers = {"content-type": "text/html", "retry-after": "2"}
    out, kept = relayed(_PLAIN, answer, body, headers)
    assert kept == {"retry-after": "2", "content-type": "application/json"}
    error = json.loads(out)["error"]
    said = NOT_JSON[(status, body)]
    assert error == {
        "message": f"the provider 'llm' at http://llm.test answered {status} with no JSON "
        f"error: {said}",
        "type": "upstream_error",
        "param": None,
        "code": str(status),
    }


_Q = "http://llm.test/v1/chat/completions?api-version=2024-06-01&api-key=azure0123456789"
WHOSE = {  # (apiKeyEnv set, Authorization sent, URL) -> every credential the call carried
    "own key alone": (True, None, "http://llm.test/v1/chat/completions", ["proxy's own key"]),
    "own key and a query key": (True, None, _Q, ["proxy's own key", "in the query"]),
    "client bearer and a query key": (False, f"Bearer {KEY}", _Q, ["the key the client sent,"]),
    "query key alone (a proxy key held back)": (False, None, _Q, ["the key the client sent in"]),
    "nothing": (False, None, "http://llm.test/v1/chat/completions", ["no key"]),
}


@pytest.mark.parametrize("case", list(WHOSE))
def test_a_refusal_names_every_credential_the_call_carried(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client's ``?api-key=`` (Azure's) goes upstream beside the ``Authorization`` the
    proxy sends (its own key's, the client's bearer): the message named the header's alone,
    the proxy's key, where the provider may have refused the client's."""
    own, authorization, url, named = WHOSE[case]
    provider = _PLAIN
    if own:
        monkeypatch.setenv("CASCADE_TEST_REFUSAL_KEY", "sk-own-0123456789")
        provider = ProviderConfig(
            base_url="http://llm.test/v1", name="llm", api_key_env="CASCADE_TEST_REFUSAL_KEY"
        )
        authorization = "Bearer sk-own-0123456789"
    for status in (401, 403):
        request = httpx.Request("POST", url)
        if authorization is not None:
            request.headers["authorization"] = authorization
        answer = Answer(status, httpx.Headers(), b"", request)
        message = json.loads(relayed(provider, answer, b"", {})[0])["error"]["message"]
        whose = message.split(f"answered {status} to ", 1)[1]
        for words in named:
            assert words in whose, (case, message)
        assert ("in the query" in whose) == ("api-key" in url), (case, message)
        assert ("proxy's own" in whose) == own, (case, message)
        assert "azure0123456789" not in message and "sk-own" not in message
