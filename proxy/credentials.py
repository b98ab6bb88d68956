"""The credential a provider call sent, and its scrubbing from what the provider answered.

Some providers quote the key they were sent in an error (``Incorrect API key provided:
sk-…``). The proxy sends one ``Authorization`` per call (the provider's ``apiKeyEnv`` key, the
client's token forwarded, or the Basic header of a baseUrl's user:password), and ``Upstream``
keeps it with the answer (``Answer.scrub``, ``StreamAnswer.scrub``): every provider error the
proxy surfaces, relayed to the client, logged, put in an event or stored, is scrubbed of it
first (``scrub_text``, ``scrub_bytes``): its token, the token's JSON-escaped spellings, and
for Basic the ``user:password`` and the password it encodes become ``[REDACTED]`` (a JSON
body whose other escapes spell one is written again, ``answers.scrubbed``).

A credential shorter than ``MIN_SECRET_CHARS`` is left alone: no real key is that short, the
placeholders clients send a keyless local server are ("EMPTY", "none", "x"), and those are
words an error message may hold as words.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable

from proxy.cascade.redaction import REDACTED

__all__ = ["CREDENTIAL_WORDS", "MIN_SECRET_CHARS", "scrub_bytes", "scrub_text", "secrets_of"]

MIN_SECRET_CHARS = 6
CREDENTIAL_WORDS = "key|token|secret|sig|auth|pass|cred"
"""The words (a regular expression's alternatives) a query parameter's name holds when it
holds a credential (``key``, ``api_key``, ``access_token``, ``sig``): what a call sent as one
(``answers.sent_secrets``) and what a log line masks (``logs.masked``). Azure Functions'
``code`` is one only whole (``country_code`` is none); each reader adds it so."""
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
