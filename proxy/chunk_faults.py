"""What a parsed chat completion or chunk must not be to be read as one (``malformed``), and an
error object a provider sends in its place (``error_answer``).

The relay (``services/relay.py``) ends a round at a chunk that fails them, and a whole
answer's check (``provider_errors.completion``) refuses a completion so: the relay, the
stored reply and a client's SDK would each read a wrongly typed field differently. Each
reason is a few words naming the field at fault and quoting none of its content. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.sse import is_map

__all__ = ["chunk_error", "error_answer", "malformed"]


def malformed(obj: Mapping[str, Any], part: str = "delta") -> str | None:
    """Why a parsed chunk (``part`` ``"delta"``) or completion (``"message"``) cannot be read
    as one, in a few words that quote none of its content; ``None`` when it can. Missing and
    ``null`` fields are read as absent; wrong types in the choices or their tool calls are
    not: the relay, the stored reply and a client's SDK would each read them differently."""
    choices = obj.get("choices")
    if choices is None:
        return None
    if not isinstance(choices, list):
        return f"choices is {_kind(choices)}, not a list"
    for pos, choice in enumerate(choices):
        if type(choice) is dict:  # the common choice, a text delta, read without a call
            body = choice.get(part)
            if type(choice.get("index")) is int and (
                body is None or type(body) is dict and body.get("tool_calls") is None
            ):
                continue
        elif not is_map(choice):
            return f"choice {pos} is {_kind(choice)}, not an object"
        why = _not_int(choice.get("index")) or _part_fault(choice.get(part), part)
        if why:
            return f"choice {pos}'s {why}"
    return None


def _part_fault(body: Any, part: str) -> str | None:
    if body is None:
        return None
    if not is_map(body):
        return f"{part} is {_kind(body)}, not an object"
    calls = body.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list):
        return f"tool_calls is {_kind(calls)}, not a list"
    for k, call in enumerate(calls):
        if not is_map(call):
            return f"tool call {k} is {_kind(call)}, not an object"
        fn = call.get("function")
        why = _not_int(call.get("index"))
        if not why and fn is not None and not is_map(fn):
            why = f"function is {_kind(fn)}, not an object"
        for key in ("name", "arguments") if not why and fn is not None else ():
            if fn.get(key) is not None and not isinstance(fn[key], str):
                why = f"function {key} is {_kind(fn[key])}, not a string"
        if why:
            return f"tool call {k}'s {why}"
    return None


def _not_int(index: Any) -> str | None:
    if index is None or (isinstance(index, int) and not isinstance(index, bool)):
        return None
    return f"index is {_kind(index)}, not an integer"


def error_answer(obj: Any) -> tuple[dict[str, Any], str] | None:
    """An OpenAI error object sent where a completion or a chunk belongs (``{"error": …}``
    without ``choices``): the error as an object (a bare string becomes its ``message``) and
    a label naming only its ``type`` and ``code``, for a log line (the message may quote the
    request); None for anything else."""
    if not is_map(obj) or obj.get("choices") or obj.get("error") is None:
        return None
    err = obj["error"]
    if not is_map(err):
        err = {"message": str(err), "type": "upstream_error", "param": None, "code": None}
    named = [f"{k} {str(err[k])[:80]!r}" for k in ("type", "code") if err.get(k) is not None]
    return dict(err), ", ".join(named) or "no type or code"


def chunk_error(chunk: Any) -> tuple[dict[str, Any], str] | None:
    """``error_answer`` for a streamed chunk, which also takes an error beside ``choices``:
    OpenRouter sends its mid-stream failure in a chunk whose choice finishes with
    ``"error"``, and the openai SDK raises on every event whose data holds an ``error``, so
    the answer failed whatever the chunk's choices say."""
    if (failure := error_answer(chunk)) is not None:
        return failure
    if is_map(chunk) and chunk.get("error"):
        return error_answer({"error": chunk["error"]})
    return None


def _kind(value: Any) -> str:
    """The JSON type of ``value``, with its article: what an error names instead of it."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"
