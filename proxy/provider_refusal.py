"""A provider's 401, relayed as an OpenAI-shaped 401 that names the provider.

A provider's error answer goes back to the client as it came (less the credential the call
sent), but for a 401. The key it refused may be the proxy's own for that provider
(``apiKeyEnv``), which the client never sent and cannot fix, or the client's token, which the
proxy forwards; and what the provider answers may be no OpenAI error at all (a gateway's
empty body, an HTML page, ``{"detail": …}``), which an SDK or a console reads as a garbled
message. So the proxy answers ``{"error": {message, type, param, code}}``: the provider's
type, code and param when it sent an OpenAI error (its message quoted, scrubbed), else
OpenAI's own for a refused key (``invalid_request_error``, ``invalid_api_key``), with a
message that names the provider and whose key it refused. It carries no
``WWW-Authenticate``: that header on a 401 is the proxy's own challenge, for the proxy key
(``auth.ProxyAuth``), so a client tells a refused proxy key (sign in again) from a key the
provider refused (the console does).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from proxy.answers import sent_secrets
from proxy.config import ProviderConfig
from proxy.jsonio import dumps, loads_json
from proxy.provider_errors import provider_name
from proxy.upstream import basic_auth

if TYPE_CHECKING:
    import httpx

    from proxy.answers import Answer, StreamAnswer

__all__ = ["relayed"]

_QUOTED = 300
"""The most characters of the provider's own words the message quotes."""


def relayed(
    provider: ProviderConfig, answer: Answer | StreamAnswer, body: bytes, headers: dict[str, str]
) -> tuple[bytes, dict[str, str]]:
    """The body and headers the client gets for a provider's error ``answer`` (``body``
    already scrubbed of the credential sent): as they came, but for a 401 (module doc)."""
    if answer.status_code != 401:
        return body, headers
    error = _error(body, answer.scrub)
    message = f"{provider_name(provider)} answered 401 to {_whose(provider, answer.request)}"
    message += f": {_said(error, body)}"
    out = {
        "message": message,
        "type": _text(error, "type") or "invalid_request_error",
        "param": _text(error, "param"),
        "code": _text(error, "code") or "invalid_api_key",
    }
    kept = {k: v for k, v in headers.items() if k != "content-type"}
    return dumps({"error": out}), {**kept, "content-type": "application/json"}


def _whose(provider: ProviderConfig, request: httpx.Request | None) -> str:
    """Whose credential the call carried, by where ``Upstream`` takes it from."""
    if provider.own_key(os.environ):
        return "the proxy's own key for it, which its operator sets (apiKeyEnv)"
    sent = request.headers.get("authorization") if request is not None else None
    if not sent and sent_secrets(request):  # a key-named parameter (``?key=``) went
        return "the key the client sent in the query, which the proxy forwards"
    if not sent:
        # the client sent none, or sent a proxy key, which never leaves (``auth.keys``)
        return "no key: none is set for it (apiKeyEnv), and the call carried none of the client's"
    if sent == basic_auth(provider.base_url):
        return "the user and password in its baseUrl"
    return "the key the client sent, which the proxy forwards"


def _error(body: bytes, scrub: Callable[[str], str]) -> dict[str, str] | None:
    """The body's OpenAI error object, if it is one: its text fields as parsed, scrubbed
    again, since a JSON writer may escape any character of the key (``\\u002B``), which the
    bytes' scrub then misses and parsing spells out."""
    try:
        data = loads_json(body)
    except (ValueError, RecursionError):
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return None
    return {k: scrub(v) for k, v in error.items() if isinstance(v, str)}


def _text(error: dict[str, str] | None, key: str) -> str | None:
    value = error.get(key) if error is not None else None
    return value[:_QUOTED] if value else None


def _said(error: dict[str, str] | None, body: bytes) -> str:
    """The provider's own words: its error's message, else its body's text when short plain
    text (no page of markup), else what the body was."""
    if (message := _text(error, "message")) is not None:
        return message
    text = " ".join(body.decode("utf-8", "replace").split())
    if not text:
        return "no body"
    if text.startswith("<"):
        return "an HTML page, no OpenAI error"
    return text if len(text) <= _QUOTED else text[: _QUOTED - 1] + "…"
