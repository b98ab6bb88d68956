"""The chat body's fields the proxy reads, checked before the session is locked.

A field the proxy reads or extends (``model``, ``stream``, ``stream_options``, ``tools``,
``messages``, the counts) of another type or out of range is the client's 400 naming it in
``param``, never a 500 nor a value read another way than the provider reads it. Each
carries OpenAI's code for the same refusal (``invalid_type``, ``integer_below_min_value``,
``missing_required_parameter``, ``empty_array``), so a client keying on OpenAI's codes
reads it as OpenAI's. Fields it only forwards are the provider's to judge.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import BELOW_MIN, EMPTY_ARRAY, INVALID_TYPE, MISSING, ClientRequestError
from proxy.jsonio import dumps

__all__ = ["COUNTS", "check_body", "is_count"]


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
            raise ClientRequestError(f"'{name}' must be {what}", param=name, code=INVALID_TYPE)
    # The proxy sets include_usage itself upstream, so a wrong one would never be refused there.
    usage = (body.get("stream_options") or {}).get("include_usage")
    if usage is not None and not isinstance(usage, bool):
        raise ClientRequestError(
            "'stream_options.include_usage' must be a boolean",
            param="stream_options.include_usage",
            code=INVALID_TYPE,
        )
    for name in COUNTS:
        value = body.get(name)
        if value is not None and (not is_count(value) or value < 1):
            raise ClientRequestError(
                f"'{name}' must be an integer of at least 1 (got {_shown(value)})",
                param=name,
                code=BELOW_MIN if is_count(value) else INVALID_TYPE,
            )
    _check_messages(body, checked)


# Counts the proxy reads (the output its budget reserves; several choices, which take no
# read_tool_output): a string, boolean or fraction was read as no count, or true as 1.
COUNTS = ("max_tokens", "max_completion_tokens", "n")


def is_count(value: Any) -> bool:
    """Whether ``value`` is a JSON integer: an int, or a float with no fraction (``100.0``,
    ``1e3``), which JSON Schema, and so OpenAI's reference, takes as an integer. Such a
    float is read as its whole value and forwarded as it came."""
    if type(value) is float:
        return value.is_integer()
    return type(value) is int


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
        raise ClientRequestError(
            "missing required parameter 'messages'", param="messages", code=MISSING
        )
    if not isinstance(messages, list) or not messages:
        raise ClientRequestError(
            "'messages' must be a non-empty array",
            param="messages",
            code=EMPTY_ARRAY if isinstance(messages, list) else INVALID_TYPE,
        )
    start = checked if 0 <= checked <= len(messages) else 0
    if all(
        type(m) is dict
        and type(m.get("role")) is str
        and type(m.get("tool_call_id", "")) in _ID_TYPES
        for m in messages[start:]
    ):
        return  # the common case, in one pass over what is new since the last request
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ClientRequestError(
                f"messages[{i}] must be an object (got {_shown(m)})",
                param=f"messages[{i}]",
                code=INVALID_TYPE,
            )
        # OpenAI names the field itself: "Missing required parameter: 'messages[0].role'."
        role = m.get("role")
        if role is None:
            raise ClientRequestError(
                f"missing required parameter 'messages[{i}].role'",
                param=f"messages[{i}].role",
                code=MISSING,
            )
        if not isinstance(role, str):
            raise ClientRequestError(
                f"messages[{i}].role must be a string (got {_shown(role)})",
                param=f"messages[{i}].role",
                code=INVALID_TYPE,
            )
        if type(m.get("tool_call_id", "")) not in _ID_TYPES:
            raise ClientRequestError(
                f"messages[{i}].tool_call_id must be a string",
                param=f"messages[{i}].tool_call_id",
                code=INVALID_TYPE,
            )
