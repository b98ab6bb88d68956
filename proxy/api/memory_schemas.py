"""The memory API as ``/openapi.json`` describes it (``proxy.api.memory``): the bodies its
``POST`` routes read, every field each route answers with, and the errors it gives, since
FastAPI reads neither a body a route parses itself nor the errors a service raises."""

from __future__ import annotations

from typing import Any

from proxy.api.openapi import SESSION_ID_PATTERN, error_response
from proxy.api.session_schemas import BAD_CURSOR, listed, obj

__all__ = [
    "ADD",
    "LIST",
    "SUGGESTIONS",
    "SESSION_FILTER",
    "SESSION_FILTER_SCHEMA",
    "ACCEPT",
    "REJECT",
    "DELETE",
    "FACT_BODY",
    "ACCEPT_BODY",
]

Responses = dict[int | str, dict[str, Any]]

_FACT = obj(
    "A stored fact; source_session names the session a promoted or accepted fact came from.",
    id="integer",
    object="string",
    scope="string",
    text="string",
    source_session=["string", "null"],
    created_at="string",
)
_SUGGESTION = obj(
    "A pending memory suggestion: the facts promotion found, and the scope accepting writes.",
    id="string",
    object="string",
    suggestion_id="string",
    session_id="string",
    scope=["string", "null"],
    facts={"type": "array", "items": {"type": "string"}},
    created_at="string",
)
_ACCEPTED = obj(
    "The suggestion, accepted: the facts stored from it (one sanitize_fact refused is left out).",
    id="string",
    object="string",
    status="string",
    scope="string",
    facts={"type": "array", "items": _FACT},
)
_REJECTED = obj("The suggestion, rejected.", id="string", object="string", status="string")
_DELETED = obj(
    "The fact, deleted: its id and object type, as OpenAI's deletes answer.",
    id="integer",
    object={"type": "string", "enum": ["memory.fact"]},
    deleted="boolean",
)


def _answer(status: int, schema: dict[str, Any], **errors: str) -> Responses:
    """A route's ``responses``: ``status`` with ``schema``, and each error status
    (``e400=`` …) with its description, in OpenAI's error shape."""
    out: Responses = {
        status: {
            "description": schema["description"],
            "content": {"application/json": {"schema": schema}},
        }
    }
    for name, description in errors.items():
        out[name.removeprefix("e")] = error_response(description)
    out["default"] = error_response(
        "Any other error, in the same shape: 401 without a valid proxy key, 503 while the "
        "database is away."
    )
    return out


_AGENT = "An agent scope this proxy key may not use (`code` `agent_not_allowed`)."
_TOO_LARGE = "A body over 64 KiB (`code` `payload_too_large`)."
_NO_SUGGESTION = "No such suggestion for this key (`code` `not_found`)."

LIST = _answer(
    200,
    listed(_FACT, cursor=True),
    e400="`scope` not `global` or `agent:<name>`, `limit`/`offset` out of range, or " + BAD_CURSOR,
    e403=_AGENT,
)
ADD = _answer(
    201,
    _FACT,
    e400="A body that is no JSON object, `text` not a string, a scope no prompt carries "
    "(`param` `scope`), or a fact sanitize_fact refuses (`code` `fact_rejected`).",
    e403=_AGENT,
    e413=_TOO_LARGE,
)
SUGGESTIONS = _answer(
    200,
    listed(_SUGGESTION, cursor=True),
    e400="`limit` or `offset` out of range, a `session_id` that is no valid session id "
    "(`code` `invalid_session_id`, `param` `session_id`), or " + BAD_CURSOR,
)
SESSION_FILTER = (
    "Only the suggestions made from this session (ids as everywhere: "
    "`[A-Za-z0-9._:-]{1,128}`, not `.` or `..`); empty or absent, every session's."
)
SESSION_FILTER_SCHEMA: dict[str, Any] = {"pattern": "^$|" + SESSION_ID_PATTERN}
"""The filter's pattern: a session id, or empty (the parameter unset)."""
ACCEPT = _answer(
    200,
    _ACCEPTED,
    e400="The suggestion was answered already, its id is over 200 characters, its scope is "
    "one no prompt carries, or "
    "`facts` is empty, not a list of strings, or names a fact the suggestion lacks "
    "(`param` `facts`).",
    e404=_NO_SUGGESTION,
    e413=_TOO_LARGE,
)
REJECT = _answer(
    200,
    _REJECTED,
    e400="The suggestion was answered already, or its id is over 200 characters.",
    e404=_NO_SUGGESTION,
)
DELETE = _answer(
    200,
    _DELETED,
    e400="A fact id that is not a positive integer (`param` `fact_id`).",
    e403="The fact's scope is an agent's this proxy key may not use (`code` `agent_not_allowed`).",
    e404="No such fact for this key (`code` `not_found`).",
)

FACT_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["text"],
                "properties": {
                    "text": {"type": "string", "description": "The fact to remember."},
                    "scope": {
                        "type": "string",
                        "default": "global",
                        "description": "`global` or `agent:<name>`.",
                    },
                },
            }
        }
    },
}
ACCEPT_BODY: dict[str, Any] = {
    "required": False,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {
                    "facts": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "The suggestion's facts to keep; without it, all of them.",
                    }
                },
            }
        }
    },
}
