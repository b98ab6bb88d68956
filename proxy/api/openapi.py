"""What ``/openapi.json`` says that FastAPI cannot read from the routes themselves.

FastAPI documents a 422 ``HTTPValidationError`` for every route with parameters, but the
validation handler (``proxy.wiring``) answers a malformed request with OpenAI's error shape and
a 400; the document says so instead.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = [
    "BODY_ERRORS",
    "EMBEDDINGS_BODY",
    "ERROR_SCHEMA",
    "RELAYED_ERROR_SCHEMA",
    "SESSION_ID_PATTERN",
    "amend",
    "error_response",
]

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
"""OpenAI's error body, which every error of the proxy has."""


def error_response(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ERROR_SCHEMA}}}


_MALFORMED = error_response(
    "A malformed request: a parameter of the wrong type or out of range (`param` names it), "
    "a body that is no JSON object, or an invalid session id (`code` `invalid_session_id`)."
)


RELAYED_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"error": {"type": "object"}},
}
"""An error of a route that forwards to a provider: the proxy's own (``ERROR_SCHEMA``) or the
provider's relayed as it came, which need not hold all four fields."""


BODY_ERRORS: dict[int | str, dict[str, Any]] = {
    400: error_response(
        "A body that is no JSON object or nests too deep, or an invalid session id in the "
        "path or X-Session-Id (`code` `invalid_session_id`)."
    ),
    413: error_response(
        "A body over CASCADE_MAX_BODY_BYTES, or holding more JSON values than "
        "CASCADE_MAX_BODY_VALUES (`code` `payload_too_large`); a gzip or deflate body, "
        "decoded."
    ),
    415: error_response(
        "A body whose Content-Encoding is none the proxy decodes (gzip, deflate) "
        "(`code` `unsupported_content_encoding`)."
    ),
    "default": {
        "description": "Any other error: the proxy's own in the same shape (401, 403, 502, "
        "504), or the provider's, relayed as it came.",
        "content": {"application/json": {"schema": RELAYED_ERROR_SCHEMA}},
    },
}
"""The errors of a route that forwards a JSON body as it came (embeddings): the chat
routes', but for the fields only a chat's check reads."""


_TOKENS = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}
EMBEDDINGS_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["model", "input"],
                    "additionalProperties": True,
                    "properties": {
                        "model": {"type": "string"},
                        "input": {
                            "description": "A text, or up to 2048 texts or token arrays.",
                            "anyOf": [
                                {"type": "string"},
                                {"type": "array", "minItems": 1, "items": {"type": "string"}},
                                _TOKENS,
                                {"type": "array", "minItems": 1, "items": _TOKENS},
                            ],
                        },
                        "encoding_format": {"type": "string", "enum": ["float", "base64"]},
                        "dimensions": {"type": "integer", "minimum": 1},
                        "user": {"type": "string"},
                    },
                }
            }
        },
    }
}
"""The embeddings routes' body, as OpenAI's ``CreateEmbeddingRequest`` has it (``model`` and
``input`` required). The proxy reads none of it but ``model`` (its metrics' label) and sends
the bytes as they came: a field of another type is the provider's 400, relayed."""


def amend(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each documented 422 replaced by the 400 the proxy answers, and the
    session id of a path with its pattern (and, in the session API, its 403, 404 and the
    rest of its errors)."""
    schema = copy.deepcopy(schema)  # its chat entries are module constants
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            responses = operation.get("responses") if isinstance(operation, dict) else None
            if responses is None:
                continue
            if responses.pop("422", None) is not None:
                responses.setdefault("400", _MALFORMED)
            _session_id(path, operation)
            if path == "/v1/sessions":  # names no session, and is keyed as the rest
                responses.setdefault("default", _ANY_OTHER)
    components = schema.get("components", {})
    schemas = components.get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    if "schemas" in components and not schemas:
        del components["schemas"]
    if "components" in schema and not components:
        del schema["components"]
    return schema


SESSION_ID_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9._:-]{1,128}$"
"""``proxy.session_id.SESSION_ID_RE`` as an ECMA regex, the dialect OpenAPI's patterns use."""
_ANY_OTHER = error_response(
    "Any other error, in the same shape: 401 without a valid proxy key, 502 when a "
    "compaction's fast model fails, 503 while the database is away."
)
_NO_SESSION = error_response("No such session for this key (`code` `not_found`).")
_OTHER_AGENT = error_response(
    "The session runs an agent this proxy key may not use (`code` `agent_not_allowed`)."
)


def _session_id(path: str, operation: dict[str, Any]) -> None:
    for param in operation.get("parameters", []):
        if param.get("in") == "path" and param["name"] == "session_id":
            param["schema"] = {**param["schema"], "pattern": SESSION_ID_PATTERN}
            if path.startswith("/v1/sessions/"):
                operation["responses"].setdefault("403", _OTHER_AGENT)
                operation["responses"].setdefault("404", _NO_SESSION)
                operation["responses"].setdefault("default", _ANY_OTHER)
