"""The 400s for a chat body the proxy cannot route: the fields it reads or extends before
forwarding, the counts it reads, and each message's role and tool_call_id. They run before the
session is locked, so a wrong type is the client's error naming it, never a 500.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import ClientRequestError
from proxy.jsonio import dumps

__all__ = ["COUNTS", "check_body"]


# Fields the proxy reads or extends before forwarding: a wrong type is the client's error
# (400 naming it), never a 500, and is caught before the session is locked.
_TYPED = (
    ("model", str, "a string"),
    ("stream", bool, "a boolean"),
    ("stream_options", dict, "an object"),
    ("tools", list, "an array"),
)


def check_body(body: dict[str, Any], checked: int = 0) -> None:
    """400 for a body the proxy cannot route; the first ``checked`` messages are known to
    pass (``ResentBodies.checked``: the same objects an earlier request's check passed)."""
    for name, kind, what in _TYPED:
        value = body.get(name)
        if value is not None and not isinstance(value, kind):
            raise ClientRequestError(f"'{name}' must be {what}", param=name)
    # The proxy sets include_usage itself upstream, so a wrong one would never be refused there.
    usage = (body.get("stream_options") or {}).get("include_usage")
    if usage is not None and not isinstance(usage, bool):
        raise ClientRequestError(
            "'stream_options.include_usage' must be a boolean", param="stream_options.include_usage"
        )
    for name in COUNTS:
        value = body.get(name)
        if value is not None and (type(value) is not int or value < 1):
            raise ClientRequestError(
                f"'{name}' must be an integer of at least 1 (got {_shown(value)})", param=name
            )
    _check_messages(body, checked)


# Counts the proxy reads (the output its budget reserves; several choices, which take no
# read_tool_output): a string, boolean or float was read as no count, or true as 1.
COUNTS = ("max_tokens", "max_completion_tokens", "n")


def _shown(value: Any) -> str:
    """``value`` as JSON writes it (``true``, ``-5``, ``100.0``), else its JSON type."""
    if isinstance(value, str | list | dict):
        return {str: "a string", list: "an array", dict: "an object"}[type(value)]
    text = dumps(value).decode()
    return text if len(text) <= 40 else text[:39] + "…"


_ID_TYPES = (str, type(None))  # a tool_call_id, or none (absent, or null as some SDKs send)


def _check_messages(body: dict[str, Any], checked: int = 0) -> None:
    messages = body.get("messages")
    if messages is None:
        raise ClientRequestError("missing required parameter 'messages'", param="messages")
    if not isinstance(messages, list) or not messages:
        raise ClientRequestError("'messages' must be a non-empty array", param="messages")
    start = checked if 0 <= checked <= len(messages) else 0
    if all(
        type(m) is dict
        and type(m.get("role")) is str
        and type(m.get("tool_call_id", "")) in _ID_TYPES
        for m in messages[start:]
    ):
        return  # the common case, in one pass over what is new since the last request
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ClientRequestError(
                f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]"
            )
        if type(m.get("tool_call_id", "")) not in _ID_TYPES:
            raise ClientRequestError(
                f"messages[{i}].tool_call_id must be a string", param=f"messages[{i}].tool_call_id"
            )
