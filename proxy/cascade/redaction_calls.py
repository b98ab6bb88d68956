"""Redaction of what a model reads in a message besides its content: the arguments of its
tool calls (or legacy ``function_call``), which are text the model reads as much."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.cascade.redaction import redact, redact_message
from proxy.cascade.types import Message

__all__ = ["redact_written"]


def _redact_arguments(call: Any, patterns: Sequence[re.Pattern[str]]) -> tuple[Any, int]:
    """A ``tool_calls`` entry or ``function_call`` with its ``arguments`` text redacted."""
    if not isinstance(call, Mapping):
        return call, 0
    fn = call.get("function", call)
    args = fn.get("arguments") if isinstance(fn, Mapping) else None
    if not isinstance(fn, Mapping) or not isinstance(args, str):
        return call, 0
    text, n = redact(args, patterns)
    if n == 0:
        return call, 0
    if fn is call:
        return {**call, "arguments": text}, n
    return {**call, "function": {**fn, "arguments": text}}, n


def redact_written(msg: Message, patterns: Sequence[re.Pattern[str]]) -> tuple[Message, int]:
    """``msg`` with every text a model reads redacted, and the count: its content
    (``redact_message``) and the arguments of its tool calls or legacy ``function_call``.
    Ingestion redacts so what a client writes (an assistant turn too); what the model itself
    wrote is stored as the provider sent it, so what the proxy derives from stored history
    for another model (the summary's input) is redacted here. The same object comes back
    when nothing matched."""
    out, total = redact_message(msg, patterns)
    calls = msg.get("tool_calls")
    if isinstance(calls, Sequence) and not isinstance(calls, str):
        done = [_redact_arguments(c, patterns) for c in calls]
        if n := sum(n for _, n in done):
            out, total = {**out, "tool_calls": [c for c, _ in done]}, total + n
    if isinstance(msg.get("function_call"), Mapping):
        call, n = _redact_arguments(msg["function_call"], patterns)
        if n:
            out, total = {**out, "function_call": call}, total + n
    return (msg, 0) if total == 0 else (out, total)
