"""The prompt's handles worded for a request that goes without ``read_tool_output``.

A cut, compacted or cleared tool result (or observation) names its handle,
``read_tool_output({"id": …})``, in its stored prompt form. The shell offers the tool only to
a request that can carry it (``services.toolloop.fit_offer``); a prompt sent without it must
not tell the model to call a tool it does not have. There each handle is worded as it is
when no copy is kept: the cut marker and the placeholder say to re-run the tool, and the
compacted result's first line says only what was done (its text is whole).

Only the text sent changes, never a stored row: the prompt form gives the same bytes on
every request without the tool, so the provider's prefix cache holds across them; the hash
chain is over what the client sent; and a later request that carries tools gets the handles
back. A marker is reworded only in the message it names (its own ``tool_call_id``, or an
observation's own handle), so a tool's output that quotes another result's marker goes as
the tool wrote it.

Every handle written for a tool result names it by ``pins.pin`` (``<tool_call_id>@<position>``):
an id can name more than one result (``call_0`` every turn), now or once the handle is frozen,
and a bare id reads the newest one (``pins.py`` says why a handle is always pinned). A
marker is reworded in its own message when it names that message's id, bare or pinned
(``pins.names``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.cascade.eviction import drop_placeholder_handle, is_placeholder
from proxy.cascade.observations import is_observation, observation_id
from proxy.cascade.pins import id_args_name
from proxy.cascade.truncation import drop_cut_handle
from proxy.cascade.types import READ_TOOL_OUTPUT, Message

__all__ = ["HANDLE", "drop_handles", "holds_handle"]

HANDLE = READ_TOOL_OUTPUT + '({"id"'
"""What every marker with a handle holds, and a message without one does not."""

_COMPACTED = "[compacted losslessly from "
_COMPACTED_WITHIN = 400  # an observation's prefix line comes before it


_EXACT = f"; the exact original: {READ_TOOL_OUTPUT}("


def _drop_compacted_handle(text: str, own: str) -> str:
    """``lossless.compacted_marker``'s first line for a handle of ``own`` without its last
    clause."""
    start = text.find(_COMPACTED, 0, _COMPACTED_WITHIN)
    if start < 0:
        return text
    end = text.find("\n", start) + 1
    if end <= 0:
        return text
    at = text.rfind(_EXACT, start, end)
    if at < 0 or not text.endswith(")]\n", 0, end):
        return text
    if not id_args_name(text[at + len(_EXACT) : end - 3], own):
        return text
    return text[:at] + "]\n" + text[end:]


def _may_name(messages: Sequence[Message], i: int, prefixes: Sequence[str]) -> bool:
    """Whether ``messages[i]`` is a message that may name a handle of its own: a tool result,
    or an observation (an evicted one too: its placeholder after an assistant message)."""
    msg = messages[i]
    role = msg.get("role")
    if role == "tool":
        return True
    return (
        role == "user"
        and bool(prefixes)
        and (
            is_observation(messages, i, prefixes, latest_too=True)
            or (i > 0 and messages[i - 1].get("role") == "assistant" and is_placeholder(msg))
        )
    )


def holds_handle(messages: Sequence[Message], prefixes: Sequence[str]) -> bool:
    """Whether a tool result or observation of ``messages`` names a handle: a prompt the
    proxy offers ``read_tool_output`` for (when the request can carry it), as it does one
    carrying a summary (``pipeline.assemble``)."""
    return any(
        _may_name(messages, i, prefixes) and HANDLE in str(m.get("content") or "")
        for i, m in enumerate(messages)
    )


def drop_handles(messages: tuple[Message, ...], prefixes: Sequence[str]) -> tuple[Message, ...]:
    """``messages`` with the handles their tool results and observations name worded as
    handles no tool reads (module docstring); the same tuple when none names one."""
    out: list[Message] | None = None
    for i, msg in enumerate(messages):
        content = msg.get("content")
        parts: list[Any] | None = None  # a rewritten result sent as parts (``text.with_text``)
        if isinstance(content, list):
            parts = content
            at = next((j for j, p in enumerate(parts) if _text_part(p)), -1)
            if at < 0:
                continue
            text = parts[at]["text"]
        elif isinstance(content, str):
            text = content
        else:
            continue
        if msg.get("role") == "tool":  # its one scan is the cut marker's (``drop_cut_handle``)
            own = str(msg.get("tool_call_id") or "")
        elif HANDLE in text and _may_name(messages, i, prefixes):
            own = observation_id(msg)
        else:
            continue
        new = drop_cut_handle(text, own)
        new = _drop_compacted_handle(drop_placeholder_handle(new, own), own)
        if new != text:
            out = list(messages) if out is None else out
            if parts is not None:
                out[i] = {
                    **msg,
                    "content": [*parts[:at], {**parts[at], "text": new}, *parts[at + 1 :]],
                }
            else:
                out[i] = {**msg, "content": new}
    return messages if out is None else tuple(out)


def _text_part(part: object) -> bool:
    return isinstance(part, dict) and isinstance(part.get("text"), str)
