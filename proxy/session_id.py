"""Session ids and pass-through tenants (DESIGN §4).

First match wins: path ``/s/{id}/``, header ``X-Session-Id``, body ``metadata.session_id``;
otherwise an id is derived from the conversation's opening so that a client which sends no id
still lands in the same session on every turn. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any, NamedTuple

from proxy.cascade.types import LEADING_ROLES
from proxy.errors import ClientRequestError
from proxy.jsonio import MAX_FIELD_DEPTH

__all__ = [
    "SessionKey",
    "SESSION_ID_RE",
    "InvalidSessionId",
    "validate_session_id",
    "header_value",
    "resolve_session_id",
    "named_session_id",
    "derive_session_id",
    "strip_proxy_fields",
    "tenant_from_bearer",
    "query_credential",
    "credential_param",
    "bearer_token",
]

SESSION_ID_RE = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9._:-]{1,128}")
"""Allowed session ids; always used with ``fullmatch``. ``.`` and ``..`` are not: clients
resolve them out of a URL path (``/v1/sessions/..`` is ``/v1/``), so the session API could
never reach such a session."""


class SessionKey(NamedTuple):
    """A session's identity: sessions are per tenant, so an id alone names none.

    A tuple, so it keys the per-replica caches and queues as the bare pair did.
    """

    tenant: str
    session_id: str


_HEADER = "the X-Session-Id header"
_ALLOWED = "1 to 128 characters from A-Z, a-z, 0-9, '.', '_', ':' and '-', other than '.' and '..'"


class InvalidSessionId(ValueError):
    """A session id outside ``SESSION_ID_RE``; the API maps it to a 400."""

    def __init__(self, value: object, source: str = "request", param: str | None = None) -> None:
        """``param``: the body field the id came from, which the 400 names (OpenAI's
        ``param``); an id from the path or a header is no parameter of the body."""
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        if isinstance(value, bytes):  # a header's bytes that are no UTF-8 text
            shown += " (not UTF-8)"
        super().__init__(f"Invalid session id {shown} from {source}: use {_ALLOWED}.")
        self.value = value
        self.source = source
        self.param = param

    def for_log(self) -> str:
        """The message without the value, which came from a header or a body and may be
        anything a client put there, a secret included."""
        return f"Invalid session id from {self.source}"


def header_value(value: str) -> str | bytes:
    """A header value as the client wrote it: ASGI hands header bytes over as Latin-1, so a
    UTF-8 id would show as mojibake ('Ã©' for 'é'). The UTF-8 text, else the bytes; a
    value beyond Latin-1 was never bytes and is returned as it is."""
    try:
        raw = value.encode("latin-1")
    except UnicodeEncodeError:
        return value
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def validate_session_id(value: str, *, source: str = "request", param: str | None = None) -> str:
    """Return ``value`` unchanged if it is a valid session id, else raise ``InvalidSessionId``
    (naming ``param``, the body field it came from)."""
    if not isinstance(value, str) or SESSION_ID_RE.fullmatch(value) is None:
        raise InvalidSessionId(value, source, param)
    return value


def _content_key(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    try:
        return json.dumps(content, sort_keys=True)
    except RecursionError:  # deeper than the hash chain's bound, met here first: its 400
        raise ClientRequestError(
            f"a message nests past {MAX_FIELD_DEPTH} levels: send one nested fewer levels",
            param="messages",
        ) from None


def _first_content(messages: list[Any], roles: Collection[str]) -> str:
    for msg in messages:
        if isinstance(msg, Mapping) and msg.get("role") in roles:
            return _content_key(msg.get("content"))
    return ""


def derive_session_id(*, body: Mapping[str, Any] | None, tenant: str, agent: str) -> str:
    """``auto-`` + 32 hex of sha256(tenant, agent, first system/developer, first user content).

    Stable across turns because clients resend the history from the start; two different
    conversations with the same opening share a session, which reconciliation then treats
    as a divergence.
    """
    raw = body.get("messages") if body is not None else None
    messages = list(raw) if isinstance(raw, list) else []
    parts = (
        tenant,
        agent,
        _first_content(messages, LEADING_ROLES),
        _first_content(messages, ("user",)),
    )
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()
    return "auto-" + digest[:32]


def resolve_session_id(
    *,
    path_id: str | None,
    header_id: str | None,
    body: Mapping[str, Any] | None,
    tenant: str,
    agent: str,
) -> str:
    """Pick the session id: ``named_session_id``, else the derived one."""
    named = named_session_id(path_id=path_id, header_id=header_id, body=body)
    return named if named is not None else derive_session_id(body=body, tenant=tenant, agent=agent)


def named_session_id(
    *, path_id: str | None, header_id: str | None, body: Mapping[str, Any] | None
) -> str | None:
    """The id the client named: path, then header, then ``metadata.session_id``; None if none.

    Each explicit id is validated; an invalid one raises ``InvalidSessionId`` rather than
    falling through, so a typo never silently lands in a derived session. ``None`` means
    absent (including a JSON ``null`` in metadata); any other non-string is invalid. An
    empty header is absent too, as an empty query value or ``CASCADE_*`` variable is: text
    has no null, and a client filling ``X-Session-Id: $RUN`` from an unset variable sends
    it empty. A JSON body has ``null`` for that, so its ``""`` is an id, and invalid.
    """
    if path_id is not None:
        return validate_session_id(path_id, source="the URL path")
    if header_id:
        try:
            return validate_session_id(header_id, source=_HEADER)
        except InvalidSessionId:
            raise InvalidSessionId(header_value(header_id), _HEADER) from None
    metadata = body.get("metadata") if body is not None else None
    if isinstance(metadata, Mapping):
        value = metadata.get("session_id")
        if value is not None:
            return validate_session_id(value, source="metadata.session_id")
    return None


def strip_proxy_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``body`` without proxy-only fields, safe to forward upstream.

    Removes ``metadata.session_id`` and drops ``metadata`` if that leaves it empty (some
    providers reject ``metadata`` without ``store``). Nothing else is touched and the input
    is not mutated.
    """
    out = dict(body)
    metadata = out.get("metadata")
    if isinstance(metadata, Mapping) and "session_id" in metadata:
        rest = {k: v for k, v in metadata.items() if k != "session_id"}
        if rest:
            out["metadata"] = rest
        else:
            del out["metadata"]
    return out


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (any case of ``Bearer``;
    possibly empty); None for no header or another scheme."""
    scheme, _, rest = (authorization or "").strip().partition(" ")
    return rest.strip() if scheme.lower() == "bearer" else None


_NAME_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
"""The words of a parameter's name: split at what is no letter or digit and where a
capital starts one (``apiKey``, ``X-Amz-Signature``)."""
_CREDENTIAL_WORDS = frozenset(
    {"sig", "signature", "authorization", "pass", "passcode", "passphrase", "cred", "creds"}
    | {"credentials"}
)
_CREDENTIAL_ENDINGS = ("key", "token", "secret", "password", "passwd", "auth", "credential")
"""A word that is one of ``_CREDENTIAL_WORDS`` or ends with one of these is a credential's
(``apikey``, ``oauth``); one holding it elsewhere is not (``keyword``, ``author``)."""


def credential_param(name: str) -> bool:
    """Whether a query parameter named ``name`` holds a credential: one of its words is a
    credential's (``key``, ``api_key``, ``apiKey``, ``access_token``, ``sig``,
    ``X-Amz-Signature``, ``authkey``), or it is Azure Functions' ``code`` whole. Narrower than
    what a log line masks (``credentials.CREDENTIAL_WORDS`` anywhere in a name): a word
    inside another (``max_tokens``, ``author``, ``design``, ``keyword``) is no credential,
    and a value that is none, changing per request, would make each request a tenant."""
    if name.strip().lower() == "code":
        return True
    words = (w.lower() for w in _NAME_WORD.findall(name))
    return any(w in _CREDENTIAL_WORDS or w.endswith(_CREDENTIAL_ENDINGS) for w in words)


def _query_credentials(query: Iterable[tuple[str, str]]) -> list[str]:
    return [v.strip() for n, v in query if credential_param(n) and v.strip()]


def query_credential(query: Iterable[tuple[str, str]]) -> str:
    """The non-empty values of ``query``'s credential parameters (``credential_param``), in
    order, one a line; "" for none."""
    return "\n".join(_query_credentials(query))


def tenant_from_bearer(
    authorization: str | None,
    query: Iterable[tuple[str, str]] = (),
    api_keys: Iterable[str] = (),
) -> str:
    """Pass-through tenant: ``t-`` + 24 hex of sha256(the request's credentials);
    ``anonymous`` without one.

    The credentials are the bearer token (a header without the ``Bearer`` scheme whole), the
    client's ``api_keys``, its ``api-key`` and ``x-api-key`` headers' (``AzureOpenAI`` sends its
    key in the first, Anthropic's clients and some gateways' in the second, each forwarded as a
    bearer is) and the values of ``query``'s credential parameters (:func:`query_credential`:
    the query goes upstream, so a client may pay its provider with one), each once, one a line.
    All of them, not the bearer alone: an SDK needs an ``api_key``, so a client paying with a
    key in the query sends a placeholder bearer (``EMPTY``) that every such client shares. One
    key is one tenant whichever way it is sent, or both ways. The tokens themselves are never
    stored; the hash only scopes data to whoever holds them.
    """
    token = bearer_token(authorization)
    if token is None and authorization is not None:
        token = authorization.strip()
    found: list[str] = [token] if token else []
    for value in [*(k.strip() for k in api_keys), *_query_credentials(query)]:
        if value and value not in found:
            found.append(value)
    if not found:
        return "anonymous"
    return "t-" + hashlib.sha256("\n".join(found).encode("utf-8")).hexdigest()[:24]
