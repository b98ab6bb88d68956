"""A provider's 401 or 403, and an error of its whose body is no JSON, relayed as an
OpenAI-shaped error of the same status that names the provider.

A provider's error answer goes back to the client as it came (less the credential the call
sent), but for these. The key a 401 or 403 refused may be the proxy's own for that provider
(``apiKeyEnv``), which the client never sent and cannot fix, or the client's token, which the
proxy forwards, or both (a client's ``?api-key=`` beside the proxy's key); and what the
provider answers may be no OpenAI error at all (a gateway's empty body, a firewall's HTML
page, Azure's ``{"statusCode": 403, "message": …}``, ``{"detail": …}``), which an SDK or a
console reads as a garbled message: openai-python 1.x quotes a whole HTML page (the proxy's
address in a firewall's) as its message, later releases say only ``Error code: 502``, which
does not tell the provider's 502 from the proxy's own. So the proxy answers
``{"error": {message, type, param, code}}``. For a 401 or 403: the provider's type, code and
param when it sent an OpenAI error (its message quoted, scrubbed), else OpenAI's own for the
status (a 401's ``invalid_request_error``, ``invalid_api_key``; a 403's
``request_forbidden``, ``provider_forbidden``), with a message that names the provider and
whose key went. For any other error whose body does not parse as JSON (an empty body, a
proxy's HTML 502, a plain-text 503): ``upstream_error`` with the status as its code, as a
stream's in-band error has, and a message naming the provider and what the body was; a JSON
body, OpenAI-shaped or not, passes as it came. The status and the headers relayed
(``Retry-After`` …) stay, so the SDK raises and retries as it would have.

A 401 carries no ``WWW-Authenticate``: that header on a 401 is the proxy's own challenge, for
the proxy key (``auth.ProxyAuth``), so a client tells a refused proxy key (sign in again) from
a key the provider refused (the console does).
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from proxy.config import ProviderConfig
from proxy.credentials import CLIENT_KEY_HEADERS, query_key_sent
from proxy.jsonio import dumps, loads_json
from proxy.provider_errors import provider_name
from proxy.sse import BOM
from proxy.upstream import basic_auth

if TYPE_CHECKING:
    import httpx

    from proxy.answers import Answer, StreamAnswer

__all__ = ["relayed"]

_QUOTED = 300
"""The most characters of the provider's own words the message quotes."""

_DEFAULTS = {
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("request_forbidden", "provider_forbidden"),
}
"""The statuses rewritten, each with the type and code its error has when the provider's
answer names none."""

_PEEK = 16 << 10
"""The most bytes of a body read for the words quoted (a page's title is in its head, and
plain text is quoted only as far as ``_QUOTED``), and parsed to tell JSON (``_is_json``).
Past it the body (up to the answer's cap) is left unread: the rewrite runs on the event
loop every request shares."""

_PAGE = re.compile(r"<(?:!doctype|html|head|body|title)\b", re.IGNORECASE)
"""A page of markup, not words to quote: one that holds a page's own tag, after words too
(``403 Forbidden`` above an nginx page, a gateway's JSON message wrapping the page it got);
a body, not a message, that begins with a tag (after a byte-order mark) is one too."""

_TITLE = re.compile(r"<title(?:\s[^<>]*)?>([^<]*)</title", re.IGNORECASE)
"""A page's title; each match attempt stops at the next ``<``, so a body of unclosed tags is
searched in linear time (a title of markup is no title)."""


def relayed(
    provider: ProviderConfig, answer: Answer | StreamAnswer, body: bytes, headers: dict[str, str]
) -> tuple[bytes, dict[str, str]]:
    """The body and headers the client gets for a provider's answer ``answer`` (``body``
    already scrubbed of the credential sent): as they came, but for a 401 or 403, and an
    error whose body is no JSON (module doc)."""
    status = answer.status_code
    if status in _DEFAULTS:
        error = _error(body, answer.scrub)
        message = f"{provider_name(provider)} answered {status} to "
        message += f"{_whose(provider, answer.request)}: {_said(error, answer, body)}"
        kind, code = _DEFAULTS[status]
        out = {
            "message": message,
            "type": _text(error, "type") or kind,
            "param": _text(error, "param"),
            "code": _text(error, "code") or code,
        }
    elif status >= 400 and not _is_json(body):
        said = _said(None, answer, body)
        message = f"{provider_name(provider)} answered {status} with no JSON error: {said}"
        out = {"message": message, "type": "upstream_error", "param": None, "code": str(status)}
    else:
        return body, headers
    kept = {k: v for k, v in headers.items() if k != "content-type"}
    return dumps({"error": out}), {**kept, "content-type": "application/json"}


def _is_json(body: bytes) -> bool:
    """Whether ``body`` parses as JSON; one nested past the parser's depth is JSON too (a
    client's parser may read it, and it passes as it came). One past ``_PEEK`` is judged by
    its first byte, unparsed: megabytes of it (an embeddings error) would hold the event
    loop for seconds, and one that opens as JSON passing as it came is no worse."""
    if len(body) > _PEEK:
        return body[:_PEEK].removeprefix(BOM).lstrip()[:1] in (b"{", b"[", b'"')
    try:
        loads_json(body)
    except ValueError as exc:
        return isinstance(exc.__cause__, RecursionError)
    return True


def _whose(provider: ProviderConfig, request: httpx.Request | None) -> str:
    """Whose credentials the call carried, by where ``Upstream`` takes each from: its
    ``Authorization`` (or a client's ``api-key`` header) and a key-named query parameter
    (``?key=``, Azure's ``?api-key=``), which the client's query brings beside whichever
    header went, so both are named."""
    header = _header_whose(provider, request)
    in_query = query_key_sent(request)
    if header is None:
        if in_query:
            return "the key the client sent in the query, which the proxy forwards"
        # the client sent none, or sent a proxy key, which never leaves (``auth.keys``)
        return "no key: none is set for it (apiKeyEnv), and the call carried none of the client's"
    if in_query:
        return f"{header}, and the key the client sent in the query (either may be the one refused)"
    return header


def _header_whose(provider: ProviderConfig, request: httpx.Request | None) -> str | None:
    """Whose credential the call's ``Authorization`` (or a client's ``api-key`` or
    ``x-api-key``) was, or
    None when it had none."""
    if provider.own_key(os.environ):
        return "the proxy's own key for it, which its operator sets (apiKeyEnv)"
    sent = request.headers.get("authorization") if request is not None else None
    headers: Mapping[str, str] = request.headers if request is not None else {}
    for name in CLIENT_KEY_HEADERS:
        if headers.get(name):
            return f"the key the client sent in its {name} header, which it forwards"
    if not sent:
        return None
    if sent == basic_auth(provider.base_url):
        return "the user and password in its baseUrl"
    return "the key the client sent, which the proxy forwards"


def _error(body: bytes, scrub: Callable[[str], str]) -> dict[str, str] | None:
    """The body's OpenAI error object, if it is one: its text fields as parsed, scrubbed
    again, since a JSON writer may escape any character of the key (``\\u002B``), which the
    bytes' scrub then misses and parsing spells out. A gateway's own error shape gives its
    words as the message: ``{"error": "…"}``, Azure API Management's ``{"statusCode": 403,
    "message": "…"}``, FastAPI's ``{"detail": "…"}``, AWS's ``{"Message": "…"}``. None for
    one past ``_PEEK``, unparsed (``_is_json``): its head is quoted as text."""
    if len(body) > _PEEK:
        return None
    try:
        data = loads_json(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if not isinstance(error, dict):
        named = {k.lower(): v for k, v in data.items() if isinstance(v, str) and v.strip()}
        said = next((named[k] for k in _SAID if k in named), None)
        return {"message": scrub(said)} if said is not None else None
    return {k: scrub(v) for k, v in error.items() if isinstance(v, str)}


_SAID = ("error", "message", "detail", "errormessage")
"""The keys whose text a gateway's non-OpenAI error says what went wrong in, in any case:
AWS's API Gateway and services write ``{"Message": …}``, its Lambda ``{"errorMessage": …}``."""


def _text(error: dict[str, str] | None, key: str) -> str | None:
    value = error.get(key) if error is not None else None
    return value[:_QUOTED] if value else None


def _said(error: dict[str, str] | None, answer: Answer | StreamAnswer, body: bytes) -> str:
    """The provider's own words: its error's message, else its body's text when short plain
    text (no page of markup: a firewall's page may hold the proxy's address, and an SDK would
    quote all of it), else what the body was, an HTML page by its title (``Attention
    Required! | Cloudflare`` says who refused). A message that is such a page (a gateway's
    JSON wrapping the page it got) is named as the body would be. The body is read in the
    charset its content type names and scrubbed as read: the bytes' scrub looks for the key
    as UTF-8 spells it, which a UTF-16 body does not."""
    message = error.get("message") if error is not None else None
    if message:
        text, whole = " ".join(message[:_PEEK].split()), len(message) <= _PEEK
    else:
        read = _decoded(body[:_PEEK], answer.headers.get("content-type"))
        text, whole = answer.scrub(" ".join(read.split())), len(body) <= _PEEK
    if not text:
        return "no body"
    if _PAGE.search(text) or (not message and text.lstrip("\ufeff").startswith("<")):
        title = _TITLE.search(text)
        # as a browser shows it: a reference may spell the key (``&#43;``), which is scrubbed
        named = " ".join(html.unescape(title[1]).split()) if title is not None else ""
        named = answer.scrub(named)
        return f"an HTML page titled {named[:_QUOTED]!r}" if named else "an HTML page"
    if message:  # the provider's words as it wrote them, lines included
        return _printable(message[:_QUOTED])
    cut = len(text) > _QUOTED or not whole
    return _printable(text[: _QUOTED - 1] + "…" if cut else text)


_CHARSET = re.compile(r"charset=[\"']?([\w.:-]+)", re.IGNORECASE)


def _decoded(head: bytes, content_type: str | None) -> str:
    """``head`` as text in the charset ``content_type`` names, else (none, or none Python
    decodes text with) UTF-8."""
    named = _CHARSET.search(content_type or "")
    try:
        return head.decode(named[1] if named else "utf-8", "replace")
    except (LookupError, UnicodeError):
        return head.decode("utf-8", "replace")


def _printable(text: str) -> str:
    """``text`` with each character a terminal would act on (an escape sequence's ``ESC``,
    a bell, a carriage return, a direction override) as U+FFFD, a line's end and a tab
    kept: a client prints the message its SDK raises."""
    return "".join(c if c.isprintable() or c in "\n\t" else "\ufffd" for c in text)
