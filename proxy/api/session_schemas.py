"""The session API's answers as ``/openapi.json`` describes them (``responses`` of each route
in ``proxy.api.sessions``): every field each one carries, and its type."""

from __future__ import annotations

from typing import Any

from proxy.api.openapi import error_response

__all__ = ["ok", "obj", "listed"]


def obj(description: str, **fields: Any) -> dict[str, Any]:
    """An object with exactly ``fields``, each a JSON type name or a schema."""
    props = {k: {"type": v} if isinstance(v, str | list) else v for k, v in fields.items()}
    return {
        "type": "object",
        "description": description,
        "required": list(props),
        "properties": props,
    }


_INT_OR_NULL = ["integer", "null"]
_LISTED = {
    "id": "string",
    "object": "string",
    "agent": "string",
    "model": ["string", "null"],
    "parent_id": ["string", "null"],
    "created_at": "string",
    "updated_at": "string",
    "message_count": "integer",
    "occupancy": _INT_OR_NULL,
    "context_limit": "integer",
    "last_prompt_tokens": _INT_OR_NULL,
    "last_estimated_tokens": _INT_OR_NULL,
    "calibration": "number",
    "reclaimed_tokens": "integer",
}
_SESSION = obj("A session as listed: fields of its view.", **_LISTED)
_INTS = {"type": "object", "additionalProperties": {"type": "integer"}}
_VIEW = obj(
    "A session's view: occupancy, limit, the window's split, what each stage reclaimed.",
    **_LISTED,
    superseded_count="integer",
    fraction="number",
    usage=_INTS,
    reclaimed=_INTS,
    summary={"type": ["object", "null"]},
)
_MESSAGE = obj(
    "A stored message and what the stages did to it.",
    pos="integer",
    role="string",
    message="object",
    tool_call_id=["string", "null"],
    truncated="boolean",
    tokens="integer",
    source="string",
    redacted="boolean",
    summarised="boolean",
    evicted="boolean",
    trimmed="boolean",
    superseded="boolean",
    created_at="string",
)


def listed(item: dict[str, Any], *, cursor: bool = False) -> dict[str, Any]:
    """A list's page of ``item``; with ``cursor``, a list that also pages by ``?cursor=``,
    whose page names the next one's (``next_cursor``)."""
    more: dict[str, Any] = {}
    where = "?offset= plus the rows shown"
    if cursor:
        more["next_cursor"] = {
            "type": ["string", "null"],
            "description": "The next page's ?cursor=, null at the end.",
        }
        where = f"its next_cursor, or {where}"
    return obj(
        f"A page; has_more: more rows are past it (at {where}).",
        object="string",
        data={"type": "array", "items": item},
        has_more="boolean",
        **more,
    )


SCHEMAS: dict[str, dict[str, Any]] = {
    "list": listed(_SESSION, cursor=True),
    "show": _VIEW,
    "messages": listed(_MESSAGE),
    "branch": obj("The new session.", id="string", object="string", parent_id="string"),
    "reset": obj("The session, reset.", id="string", object="string", reset="boolean"),
    "delete": obj("The session, deleted.", id="string", object="string", deleted="boolean"),
    "compact": obj(
        "What the compaction did; compacted false (and reason) when nothing was folded.",
        id="string",
        object="string",
        version=_INT_OR_NULL,
        boundary="integer",
        folded="integer",
        tokens_before="integer",
        tokens_after="integer",
        compacted="boolean",
        reason=["string", "null"],
    ),
    "tool_output": obj(
        "A page of a tool result's stored text.",
        id="string",
        object="string",
        total_chars="integer",
        original_bytes="integer",
        capped="boolean",
        page="string",
        has_more="boolean",
        next_offset=_INT_OR_NULL,
    ),
}


BAD_CURSOR = (
    "a `cursor` no page gave (`param` `cursor`) or one with an `offset` past 0 (`param` `offset`)."
)
"""What a list paging by ``?cursor=`` answers with a 400 besides (``query.cursor_place``)."""


def ok(name: str, *, e400: str | None = None) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses``: its 200 with the schema ``SCHEMAS[name]``, and its 400 when
    ``e400`` says more of it than a malformed request (``openapi.amend``)."""
    content = {"application/json": {"schema": SCHEMAS[name]}}
    out: dict[int | str, dict[str, Any]] = {
        200: {"description": SCHEMAS[name]["description"], "content": content}
    }
    if e400 is not None:
        out[400] = error_response(e400)
    return out
