"""The credential a provider call sent, and its scrubbing from what the provider answered.

Some providers quote the key they were sent in an error (``Incorrect API key provided: sk-…``).
The proxy sends one ``Authorization`` per call (the provider's ``apiKeyEnv`` key, the client's
token forwarded, or the Basic header of a baseUrl's user:password; a client's ``api-key`` or
``x-api-key`` header, forwarded too; a key in the client's query), and ``Upstream`` keeps it
with the answer (``Answer.scrub``, ``StreamAnswer.scrub``): every provider error the proxy
surfaces, relayed to the client, logged, put in an event or stored, is scrubbed of it first
(``scrub_text``, ``scrub_bytes``): its token, the token's JSON-escaped spellings, and for Basic
the ``user:password`` and the password it encodes become ``[REDACTED]`` (a JSON body whose other
escapes spell one is written again, ``answers.scrubbed``).

A credential shorter than ``MIN_SECRET_CHARS`` is left alone: no real key is that short, the
placeholders clients send a keyless local server are ("EMPTY", "none", "x"), and those are
words an error message may hold as words.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping

import httpx

from proxy.cascade.redaction import REDACTED

__all__ = [
    "CLIENT_KEY_HEADER",
    "CLIENT_KEY_HEADERS",
    "CREDENTIAL_PARAM",
    "CREDENTIAL_WORDS",
    "MIN_SECRET_CHARS",
    "client_keys",
    "header_secrets",
    "query_key_sent",
    "scrub_bytes",
    "scrub_text",
    "secrets_of",
    "sent_authorization",
    "sent_secrets",
]

MIN_SECRET_CHARS = 6
CREDENTIAL_WORDS = "key|token|secret|sig|auth|pass|cred"
"""The words (a regular expression's alternatives) a query parameter's name holds when it
holds a credential (``key``, ``api_key``, ``access_token``, ``sig``): what a call sent as one
(``sent_secrets``) and what a log line masks (``logs.masked``). Azure Functions'
``code`` is one only whole (``country_code`` is none); each reader adds it so."""
CLIENT_KEY_HEADER = "api-key"
"""The header Azure OpenAI takes a key in, which its SDK's ``AzureOpenAI`` client sends in
place of ``Authorization``: a client's key as its ``Authorization`` is, forwarded as it came
(``Upstream``) and scrubbed from what the provider answers (README Decisions)."""
CLIENT_KEY_HEADERS = (CLIENT_KEY_HEADER, "x-api-key")
"""The headers a client's key comes in beside ``Authorization``: Azure's ``api-key`` and
``x-api-key`` (Anthropic's, and several gateways'). Each is a client's key as its
``Authorization`` is: forwarded in the header it came in when the provider has no key of
the proxy's, kept back with proxy keys, scrubbed from what the provider answers, and one of
its sender's tenant credentials (README Decisions)."""
_REDACTED_BYTES = REDACTED.encode()
_SCHEMES = frozenset({"bearer", "basic"})


def secrets_of(authorization: str | None) -> tuple[str, ...]:
    """The spellings of the credential in an ``Authorization`` value that a provider may
    quote, longest first (so one that holds another is replaced whole)."""
    if not authorization:
        return ()
    value = authorization.lstrip()
    scheme, sep, token = value.partition(" ")
    token = token.strip() if sep else value.strip()  # a bare key, sent without a scheme
    if not sep and token.lower() in _SCHEMES:  # a scheme with no token: no credential
        return ()
    found = [token]
    if sep and scheme.lower() == "basic":
        try:
            raw = base64.b64decode(token, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        # httpx encodes user:password as UTF-8: a provider quotes that text (or its JSON
        # escapes); the latin-1 reading spells the same bytes one character per byte
        for decoded in {raw.decode("utf-8", "replace"), raw.decode("latin-1")}:
            found += [decoded, decoded.partition(":")[2]]
    return _spellings(found)


def _spellings(found: Iterable[str]) -> tuple[str, ...]:
    """Each of ``found`` as sent and as a JSON string spells it, longest first, none
    shorter than ``MIN_SECRET_CHARS``."""
    forms: set[str] = set()
    for secret in found:
        forms.add(secret)
        escaped = json.dumps(secret)[1:-1]  # as a JSON string spells it: \" \\ \u00e9
        forms.update((escaped, escaped.replace("/", "\\/")))  # and with "/" escaped (PHP's)
    return tuple(
        sorted((f for f in forms if len(f) >= MIN_SECRET_CHARS), key=lambda f: (-len(f), f))
    )


def scrub_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` replaced by ``[REDACTED]``."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def scrub_bytes(data: bytes, secrets: Iterable[str]) -> bytes:
    """``data`` with each of ``secrets`` (as the header carried it: one byte per character)
    replaced by ``[REDACTED]``."""
    for secret in secrets:
        raw = secret.encode("latin-1", "replace")
        if raw in data:
            data = data.replace(raw, _REDACTED_BYTES)
    return data


def sent_authorization(request: httpx.Request | None) -> str | None:
    """The ``Authorization`` a call sent, if any."""
    sent: str | None = request.headers.get("authorization") if request is not None else None
    return sent


def client_keys(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The keys ``headers`` carry in ``CLIENT_KEY_HEADERS``, stripped, in that order; a
    blank one is none."""
    return tuple(k for n in CLIENT_KEY_HEADERS if (k := (headers.get(n) or "").strip()))


def header_secrets(request: httpx.Request | None) -> tuple[str, ...]:
    """The credentials a call's headers carried, as its provider may quote them: its
    ``Authorization``'s (``secrets_of``) and its ``api-key`` or ``x-api-key``, bare keys."""
    found = secrets_of(sent_authorization(request))
    keys = client_keys(request.headers) if request is not None else ()
    return _spellings((*found, *keys)) if keys else found


CREDENTIAL_PARAM = re.compile(rf"{CREDENTIAL_WORDS}|^code$", re.IGNORECASE)
"""A query parameter whose name says it holds a credential (``key``, ``api-key``,
``access_token``, ``sig``; Azure Functions' ``code`` whole, ``country_code`` is none): what a
call sent as one (``sent_secrets``), scrubbed from what its provider answers: the query goes
upstream, so a client may pay with one. Wider than a pass-through tenant's reading
(``session_id.credential_param``, whole words), as a scrub may take too much, a tenant not."""


def sent_secrets(request: httpx.Request | None) -> tuple[str, ...]:
    """The credentials a call sent, as its provider may quote them: its headers'
    (``header_secrets``), and the value of each query parameter whose name says it holds one
    (``key``, ``api_key``, ``access_token``, ``sig``, ``code`` …; a client's query goes
    upstream, and a gateway that takes its key there quotes it back, the URL it was called at
    included), as sent and percent-encoded. Other parameters (``api-version``) are words an
    error means."""
    if request is None:
        return ()
    found = list(header_secrets(request))
    url = getattr(request, "url", None)  # a stand-in request may have headers alone
    for name, value in url.params.multi_items() if url is not None else ():
        if CREDENTIAL_PARAM.search(name) and len(value) >= MIN_SECRET_CHARS:
            # as sent, its "+" read as a space by the proxy too, and as the URL spells it
            for form in {value, value.replace(" ", "+"), str(httpx.QueryParams({"k": value}))[2:]}:
                found += (form, json.dumps(form)[1:-1])
    return tuple(sorted(set(found), key=lambda f: (-len(f), f)))


def query_key_sent(request: httpx.Request | None) -> bool:
    """Whether the call carried a credential in its query (a client's ``?api-key=``) beside
    those of its headers: what a refusal names (``provider_refusal``) and its log line says
    (``provider_errors.log_relayed``)."""
    header = set(header_secrets(request))
    return any(s not in header for s in sent_secrets(request))
