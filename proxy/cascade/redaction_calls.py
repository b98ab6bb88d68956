"""Redaction of what a model reads in a message besides its content's text: the arguments
of its tool calls (or legacy ``function_call``) and its refusal (the ``refusal`` field, or
``refusal`` parts), which are text the model reads as much."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.cascade.redaction import REDACTED, redact, redact_message
from proxy.cascade.types import Message

__all__ = ["redact_written"]


def _redact_value(value: Any, patterns: Sequence[re.Pattern[str]]) -> tuple[Any, int]:
    """``value`` (a call's ``arguments``) redacted: its text, or for arguments a client sent
    as a JSON object rather than its text, that object (``_redact_json``). The same object
    when nothing matched."""
    if isinstance(value, str):
        return _redact_text(value, patterns)
    if not isinstance(value, Mapping | list):
        return value, 0
    return _redact_json(value, patterns)


def _redact_text(text: str, patterns: Sequence[re.Pattern[str]]) -> tuple[str, int]:
    """Arguments' text redacted. Text that is JSON and is no longer once redacted (a match
    that ran from one string into the next: ``"Enter password:","timeout":5``) is read as
    its object, entry by entry (``_redact_parts``): as sent when no entry holds a secret,
    else that object's JSON text, so the server reading the arguments still can."""
    redacted, n = redact(text, patterns)
    if n == 0 or not text.lstrip().startswith(("{", "[")):
        return redacted, n
    try:
        json.loads(redacted)
        return redacted, n
    except (RecursionError, ValueError):
        pass
    try:
        value = json.loads(text)
    except (RecursionError, ValueError):
        return redacted, n
    parted, found = _redact_parts(value, patterns)
    if found == 0:
        return text, 0
    try:
        out = json.dumps(parted, ensure_ascii=False, allow_nan=False)
        out.encode()  # a lone surrogate the text escaped stays escaped: no store holds one
    except UnicodeEncodeError:
        out = json.dumps(parted, allow_nan=False)
    except (RecursionError, ValueError):
        return redacted, n
    return out, found


def _redact_json(value: Any, patterns: Sequence[re.Pattern[str]]) -> tuple[Any, int]:
    """``value`` (an object, array or scalar of a call's arguments) redacted as its JSON text
    (the form the field takes, and what the model reads): a pattern that reads a secret by
    its key (``"password": "…"``) finds it there as in the text. That text redacted is read
    back, so arguments given as an object stay one (the server the client sends objects to
    gets one). A text that is no longer JSON (a match that ran from one string into the
    next: ``"Enter password:", "timeout": 5``) is not kept: each entry is read alone
    (``_redact_parts``), so a match that only seemed one leaves the object as sent. The
    same object when nothing matched; one nested past what its encoding reaches is
    ``REDACTED``."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (RecursionError, TypeError, ValueError):
        return REDACTED, 1
    redacted, n = redact(text, patterns)
    if n == 0:
        return value, 0
    try:
        return json.loads(redacted), n
    except (RecursionError, ValueError):
        return _redact_parts(value, patterns)


def _redact_parts(value: Any, patterns: Sequence[re.Pattern[str]]) -> tuple[Any, int]:
    """``value``, whose JSON text redacted is no JSON, redacted part by part: an array's
    items and an object's entries each as its own JSON text (``_redact_json``); an entry
    alone, its key as a string and its value as its own text; a scalar's redacted text
    that is still no JSON is ``REDACTED`` whole, a secret's quote being in what matched."""
    if isinstance(value, list):
        items = [_redact_json(item, patterns) for item in value]
        n = sum(found for _, found in items)
        return (value, 0) if n == 0 else ([item for item, _ in items], n)
    if isinstance(value, Mapping) and len(value) > 1:
        out: dict[str, Any] = {}
        total = 0
        for key, held in value.items():
            entry, n = _redact_json({key: held}, patterns)
            out.update(entry if isinstance(entry, Mapping) else {key: REDACTED})
            total += n
        return (value, 0) if total == 0 else (out, total)
    if isinstance(value, Mapping):
        ((key, held),) = value.items()
        new_key, n = redact(str(key), patterns)
        new_held, found = _redact_json(held, patterns)
        return (value, 0) if n + found == 0 else ({new_key: new_held}, n + found)
    return REDACTED, 1


def _redact_arguments(call: Any, patterns: Sequence[re.Pattern[str]]) -> tuple[Any, int]:
    """A ``tool_calls`` entry or ``function_call`` with its ``arguments`` redacted: their
    text, or given as an object, its JSON text (``_redact_value``)."""
    if not isinstance(call, Mapping):
        return call, 0
    fn = call.get("function", call)
    if not isinstance(fn, Mapping) or fn.get("arguments") is None:
        return call, 0
    text, n = _redact_value(fn["arguments"], patterns)
    if n == 0:
        return call, 0
    if fn is call:
        return {**call, "arguments": text}, n
    return {**call, "function": {**fn, "arguments": text}}, n


def _redact_refusals(msg: Message, patterns: Sequence[re.Pattern[str]]) -> tuple[Message, int]:
    """``msg`` with its ``refusal`` text and its content's ``refusal`` parts redacted (an
    assistant's: no other role refuses)."""
    out, total = msg, 0
    if msg.get("role") != "assistant":
        return msg, 0
    if isinstance(msg.get("refusal"), str):
        text, total = redact(msg["refusal"], patterns)
        if total:
            out = {**msg, "refusal": text}
    content = msg.get("content")
    if not isinstance(content, Sequence) or isinstance(content, str):
        return out, total
    parts, n = list(content), 0
    for i, part in enumerate(parts):
        if not isinstance(part, Mapping) or part.get("type") != "refusal":
            continue
        held = part.get("refusal")
        if isinstance(held, str):
            text, found = redact(held, patterns)
            if found:
                parts[i], n = {**part, "refusal": text}, n + found
    return (out, total) if n == 0 else ({**out, "content": parts}, total + n)


def redact_written(msg: Message, patterns: Sequence[re.Pattern[str]]) -> tuple[Message, int]:
    """``msg`` with every text a model reads redacted, and the count: its content
    (``redact_message``), its refusal, and the arguments of its tool calls or legacy
    ``function_call``.
    Ingestion redacts so what a client writes (an assistant turn too); what the model itself
    wrote is stored as the provider sent it, so what the proxy derives from stored history
    for another model (the summary's input) is redacted here. The same object comes back
    when nothing matched."""
    out, total = redact_message(msg, patterns)
    out, n = _redact_refusals(out, patterns)
    total += n
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
