"""Errors the proxy answers with, all in OpenAI's shape.

::

    ProxyError
      ├ ClientRequestError (400: bad session id, malformed body)
      │   ├ PayloadTooLarge (413)
      │   └ UnsupportedMediaType (415: a body's Content-Encoding the proxy does not decode)
      ├ ContextLengthExceeded (400, code "context_length_exceeded"; lives in cascade.types)
      ├ Unauthorized (401: a missing or unknown key)
      ├ PermissionDenied (403: a proxy key limited to other agents)
      ├ NotFound (404, incl. another tenant's session)
      ├ UpstreamUnavailable (502: provider unreachable)
      │   ├ UpstreamBadResponse (502: the provider answered, unusably)
      │   └ CompactionFailed (502: a forced compaction got no usable briefing)
      ├ UpstreamTimeout (504)
      ├ ServerBusy (503: whole answers hold the proxy's budget; ``Retry-After``)
      ├ ClientDisconnected (499: the client went away before its answer; only logged)
      └ ConfigError (config.py; never reaches a client)

Upstream non-2xx responses are *not* wrapped: they are relayed byte for byte (less the
credential sent), but for a 401, answered OpenAI-shaped naming the provider
(``provider_refusal``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.cascade.types import ContextLengthExceeded

__all__ = [
    "ProxyError",
    "ClientRequestError",
    "INVALID_TYPE",
    "BELOW_MIN",
    "MISSING",
    "EMPTY_ARRAY",
    "INVALID_VALUE",
    "PayloadTooLarge",
    "UnsupportedMediaType",
    "NotFound",
    "Unauthorized",
    "PermissionDenied",
    "UpstreamUnavailable",
    "UpstreamBadResponse",
    "CompactionFailed",
    "UpstreamTimeout",
    "ClientDisconnected",
    "SessionBusy",
    "ServerBusy",
    "ContextLengthExceeded",
    "error_body",
]


class ProxyError(Exception):
    status_code = 500
    type = "server_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        log_message: str | None = None,
        code: str | None = None,
    ) -> None:
        """``log_message`` replaces ``message`` in the log when the message quotes what the
        client sent (the log never holds a body). ``code`` replaces the class's, for a 400
        OpenAI answers with a code of its own (``invalid_type``, ``integer_below_min_value``
        …): clients that key on OpenAI's codes read the proxy's refusal as OpenAI's."""
        super().__init__(message)
        self.message = message
        self.param = param
        self.log_message = log_message
        if code is not None:
            self.code = code


class ClientRequestError(ProxyError):
    status_code = 400
    type = "invalid_request_error"


# OpenAI's codes for the 400s it answers a body field with; the proxy's refusal of the same
# field carries the same code (README "Errors the proxy makes itself"), else ``null``.
INVALID_TYPE = "invalid_type"
"""A field of another JSON type than it takes."""
BELOW_MIN = "integer_below_min_value"
"""An integer below the least it takes (a count of 0)."""
MISSING = "missing_required_parameter"
"""A field the request needs, left out."""
EMPTY_ARRAY = "empty_array"
"""An array that takes at least one item, sent empty (``messages: []``)."""
INVALID_VALUE = "invalid_value"
"""A value of the right type that is none the field takes (a scope of no allowed form)."""


class PayloadTooLarge(ClientRequestError):
    status_code = 413
    code = "payload_too_large"


class UnsupportedMediaType(ClientRequestError):
    status_code = 415
    code = "unsupported_media_type"


class Unauthorized(ProxyError):
    status_code = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class PermissionDenied(ProxyError):
    """OpenAI answers a 403 with type ``request_forbidden``; its SDKs raise
    ``PermissionDeniedError``."""

    status_code = 403
    type = "request_forbidden"
    code = "agent_not_allowed"

    @classmethod
    def agent(
        cls, agents: Sequence[str], agent: str, *, session_id: str | None = None
    ) -> PermissionDenied:
        """The 403 of a key limited to ``agents`` asked for ``agent``; with ``session_id``,
        ``agent`` is that session's, and the message says so."""
        what = (
            f"agent {agent!r}"
            if session_id is None
            else f"session {session_id!r} (agent {agent!r})"
        )
        return cls(f"this API key may not use {what}; it may use {', '.join(agents)}")


class NotFound(ProxyError):
    status_code = 404
    type = "not_found_error"
    code = "not_found"


class SessionBusy(ProxyError):
    """A session operation that could not get hold of the session in the tries it has (a
    forced compaction whose session moved to another agent before each try held its
    claim): nothing done, and trying again later may succeed."""

    status_code = 409
    type = "invalid_request_error"
    code = "session_busy"


class UpstreamUnavailable(ProxyError):
    status_code = 502
    type = "upstream_error"
    code = "upstream_unreachable"


class UpstreamBadResponse(UpstreamUnavailable):
    """The provider answered, but with nothing a client can use: an error object sent as a
    success, a body that broke off, JSON that does not parse or is no chat completion, a
    stream with no chat chunk, a redirect, an encoding the proxy cannot decode. A 502 as an
    unreachable provider's is (the SDKs key on the status), with a code of its own, so an
    operator does not look for a network fault; a stream's error frame carries the same."""

    code = "upstream_bad_response"


class CompactionFailed(UpstreamUnavailable):
    """A forced compaction whose fast model gave no usable briefing: unreachable, failing, or
    answering what is no briefing. Its code is the ``context.compaction.failed`` event's
    reason, since the provider may well have answered."""

    code = "summary_failed"


class UpstreamTimeout(ProxyError):
    status_code = 504
    type = "upstream_error"
    code = "upstream_timeout"


class ServerBusy(ProxyError):
    """The whole answers the proxy holds have spent its budget (``proxy.answer_budget``):
    a 503 the SDKs retry after ``retry_after`` seconds, which the response's
    ``Retry-After`` says."""

    status_code = 503
    type = "server_error"
    code = "server_busy"
    retry_after = "1"


class ClientDisconnected(ProxyError):
    """The client closed its connection before its answer (``services/client_watch.py``).
    Nobody reads the response: the status, nginx's "client closed request", is for the
    access line and the metrics, and the message for the log line that says why."""

    status_code = 499
    type = "invalid_request_error"
    code = "client_disconnected"


def error_body(
    message: str, *, type: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` — the shape every client parses."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def exception_body(exc: Exception) -> tuple[int, dict[str, Any]]:
    """Status and body for a domain error (ProxyError or ContextLengthExceeded)."""
    if isinstance(exc, ContextLengthExceeded):
        return exc.status_code, error_body(str(exc), type=exc.type, code=exc.code, param="messages")
    if isinstance(exc, ProxyError):
        return exc.status_code, error_body(
            exc.message, type=exc.type, code=exc.code, param=exc.param
        )
    return 500, error_body("internal error in the proxy; see its log", type="server_error")
