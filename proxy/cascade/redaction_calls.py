"""Redaction of what a model reads in a message besides its content's text: the arguments
and names of its tool calls (or legacy ``function_call``), its ``refusal`` field and its
``name``, and content that is no text (one object, a part that is a list), which are text the
model reads as much, and the summary's fast model too."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from itertools import islice, takewhile
from typing import Any

from proxy.cascade.redaction import REDACTED, redact, redact_message
from proxy.cascade.redaction_pem import Block, spans_strings
from proxy.cascade.text import has_text
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
    that ran from one string into the next: ``"Enter password:","timeout":5``), or no
    longer of its shape (``_same_shape``), or holding a PEM block across strings
    (``spans_strings``), is read as its object, entry by entry
    (``_redact_parts``): as sent when no entry holds a secret, else that object's JSON
    text, so the server reading the arguments still can, all of them."""
    redacted, n = redact(text, patterns)
    if n == 0 or not text.lstrip().startswith(("{", "[")):
        return redacted, n
    try:
        value = json.loads(text)
    except (RecursionError, ValueError):
        return redacted, n
    try:
        if _same_shape(value, json.loads(redacted)) and not spans_strings(value, patterns):
            return redacted, n
    except (RecursionError, ValueError):
        pass
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
    next: ``"Enter password:", "timeout": 5``), no longer of the object's shape
    (``_same_shape``), or holding a PEM block across strings (``spans_strings``), is not
    kept: each entry is read alone (``_redact_parts``), so a match that only seemed one
    leaves the object as sent. The same object when nothing matched; one nested past what
    its encoding reaches is ``REDACTED``."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (RecursionError, TypeError, ValueError):
        return REDACTED, 1
    redacted, n = redact(text, patterns)
    if n == 0:
        return value, 0
    try:
        read = json.loads(redacted)
    except (RecursionError, ValueError):
        return _redact_parts(value, patterns)
    if _same_shape(value, read) and not spans_strings(value, patterns):
        return read, n
    return _redact_parts(value, patterns)


def _same_shape(value: Any, read: Any) -> bool:
    """Whether ``read`` has ``value``'s containers, of the same sizes, in the same places: a
    match that ran across entries and still left JSON (a PEM block's BEGIN line in one
    string, its END line in a later one) read back without the entries between. Walked
    without recursion."""
    stack = [(value, read)]
    while stack:
        a, b = stack.pop()
        if isinstance(a, Mapping):
            if not isinstance(b, Mapping) or len(a) != len(b):
                return False
            stack.extend(zip(a.values(), b.values(), strict=True))
        elif isinstance(a, list):
            if not isinstance(b, list) or len(a) != len(b):
                return False
            stack.extend(zip(a, b, strict=True))
        elif isinstance(b, Mapping | list):
            return False
    return True


def _redact_parts(value: Any, patterns: Sequence[re.Pattern[str]]) -> tuple[Any, int]:
    """``value``, whose JSON text redacted is no JSON, redacted part by part: each scalar as
    the JSON text of its entry (``{"key": value}``, which is all a pattern reading a secret by
    its key needs; an array's item alone), read back, and a string that holds none so, with
    the entries before it, which one named by its sibling needs (``_by_siblings``); an entry
    whose text redacted is still no JSON (a secret's quote in what matched) has its value
    ``REDACTED`` whole, unless it is a number (or a constant): JSON holds no secret
    unquoted. A container keeps its place and its key, read as its JSON text as a scalar is
    (not as bare text, where a value that ends it is read otherwise: ``"token=5"``). Two keys
    redacted to one text both stay (``_unused_key``). A PEM block across strings (a key
    written as its lines) is what the whole text matched as one: every string from one whose
    BEGIN line is left open to the next holding an END line is ``REDACTED``
    (``redaction_pem.Block``).
    Walked without recursion, in the text's order, each scalar written once: a value nested
    as deep as its encoding reaches costs its size, no more. The same object when nothing
    matched."""
    top: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(top, 0, value)]
    block = Block(value, patterns)
    places: dict[int, int] = {}
    openers: dict[int, Any] = {}  # an object's key in the object holding it
    total = 0
    while stack:
        into, at, node = stack.pop()
        if isinstance(node, Mapping | list):
            made: Any = [None] * len(node) if isinstance(node, list) else {}
            if isinstance(into, dict):
                at, n = _read_key(at, patterns)
                at, total = _unused_key(into, at, places), total + n
                openers[id(made)] = at
            into[at] = made
            entries = enumerate(node) if isinstance(node, list) else node.items()
            stack.extend((made, k, v) for k, v in reversed(list(entries)))
            continue
        if block.spans(node, into):
            read, n = REDACTED, 1
            if isinstance(into, dict):
                at, found = _read_key(at, patterns)
                n += found
        elif not isinstance(into, dict):
            read, n = _read_back(node, patterns)
            read = REDACTED if read is _NO_JSON else read
        else:
            entry, n = _read_back({at: node}, patterns)
            if isinstance(entry, Mapping) and len(entry) == 1:
                ((at, read),) = entry.items()
            else:
                at, n = _read_key(at, patterns)
                read = node
                # a number read as a key's value stays (``"max_tokens": -1``): JSON quotes
                # a secret
                if isinstance(node, str):
                    read, n = REDACTED, n + 1
        if n == 0 and isinstance(node, str):  # unnamed alone: named by a sibling?
            read = _by_siblings(into, at, node, patterns, openers.get(id(into)))
            n = int(read is not node)
        if isinstance(into, dict):
            at = _unused_key(into, at, places)
        into[at], total = read, total + n
    return (value, 0) if total == 0 else (top[0], total)


def _unused_key(into: dict[Any, Any], key: Any, places: dict[int, int]) -> Any:
    """``key``, or when an entry before it in ``into`` has it (two keys redacted to one text:
    ``token=abc1`` and ``token=xyz2``), it with a place in the object after its own
    (``token=[REDACTED] (3)``), so both entries are kept. ``places`` holds each object's next
    place to try, which only grows: a place taken is passed over once, however many keys
    collide."""
    if key not in into:
        return key
    place = max(places.get(id(into), 0), len(into) + 1)
    while f"{key} ({place})" in into:
        place += 1
    places[id(into)] = place + 1
    return f"{key} ({place})"


def _by_siblings(
    into: Any, at: Any, node: str, patterns: Sequence[re.Pattern[str]], opener: Any = None
) -> Any:
    """``node``, the string at ``at`` that read alone holds no secret, read after the entries
    before it in its object or array (``into``, as read so far), nearest first, up to three
    scalars: a value named by its sibling (``"name": "DB_PASSWORD"`` before ``"value": …``,
    or a YAML file's lines, ``- name: DB_PASSWORD`` before ``  value: …``), as the whole
    text reads it; in an object, when they are all its entries before ``node``, under the
    key it is the value of (``opener``; None at the top): a value whose object a secret's key
    opens (``"db_password": {"sensitive": true, "value": …}``). ``node`` itself when none of
    them redacts it, which one read of all three with it tells in most cases: a match with
    fewer is one with all of them."""
    if isinstance(into, dict):
        before = list(islice(reversed(into.items()), _SIBLINGS))
    else:
        before = [(None, v) for v in reversed(into[max(0, at - _SIBLINGS) : at])]
    scalars = list(takewhile(lambda entry: not isinstance(entry[1], Mapping | list), before))
    for count in (len(scalars), *range(1, len(scalars))):
        window = scalars[:count][::-1]
        if isinstance(into, dict):
            entries = {**dict(window), at: node}
            if opener is None or count < len(into):
                read, n = _read_back(entries, patterns)
            else:  # under its key: read back as one entry, whatever the key reads as
                read, n = _read_back({opener: entries}, patterns)
                one = isinstance(read, Mapping) and len(read) == 1
                read = next(iter(read.values())) if one else None
            ok = isinstance(read, Mapping) and len(read) == count + 1
            found = read.get(str(at), node) if ok else node
        else:
            read, n = _read_back([v for _, v in window] + [node], patterns)
            ok = isinstance(read, list) and len(read) == count + 1
            found = read[-1] if ok else node
        if found != node:
            return found
        if n == 0:  # nothing in all of them: nothing in fewer
            break
    return node


_SIBLINGS = 3
"""The most entries before a value that may name it: its name and two short entries between
(``"Type": "SecureString"``), as the sibling pattern reads them."""

_NO_JSON = object()
"""What ``_read_back`` gives for a text that is no JSON once redacted."""


def _read_back(value: Any, patterns: Sequence[re.Pattern[str]]) -> tuple[Any, int]:
    """``value`` (a scalar, or an entry holding one) as its JSON text redacted, read back
    (``_NO_JSON`` when it no longer parses); the same value when nothing matched."""
    text = json.dumps(value, ensure_ascii=False)
    redacted, n = redact(text, patterns)
    if n == 0:
        return value, 0
    try:
        return json.loads(redacted), n
    except ValueError:
        return _NO_JSON, n


def _read_key(key: Any, patterns: Sequence[re.Pattern[str]]) -> tuple[str, int]:
    """An object's key read alone, as its JSON text redacted (``_read_back``); ``REDACTED``
    when that is no JSON."""
    read, n = _read_back(str(key), patterns)
    return (REDACTED if read is _NO_JSON else read), n


def _redact_arguments(call: Any, patterns: Sequence[re.Pattern[str]]) -> tuple[Any, int]:
    """A ``tool_calls`` entry or ``function_call`` with its ``arguments`` redacted: their
    text, or given as an object, its JSON text (``_redact_value``); and its function's name,
    which the summary renders beside them."""
    if not isinstance(call, Mapping):
        return call, 0
    fn = call.get("function", call)
    if not isinstance(fn, Mapping):
        return call, 0
    out: dict[str, Any] = dict(fn)
    total = 0
    for key in ("name", "arguments"):
        if fn.get(key) is not None:
            out[key], n = _redact_value(fn[key], patterns)
            total += n
    if total == 0:
        return call, 0
    return (out, total) if fn is call else ({**call, "function": out}, total)


# Parts whose entries are media (an image's URL or data, audio, a file's bytes): no text,
# and left as sent, since a pattern matching inside base64 would corrupt them.
_MEDIA = frozenset(
    ("image_url", "input_image", "image", "input_audio", "audio", "file", "input_file")
)


def _redact_content(msg: Message, patterns: Sequence[re.Pattern[str]]) -> tuple[Message, int]:
    """``msg`` with what the model and the summary read of its content besides text
    redacted: content that is one object rather than a list (rendered as its JSON text), and
    each part that is no text: one that is no object (a list, rendered as itself) as its JSON
    text (``_redact_value``), a media part's ``type`` (rendered ``[type]``; its other
    entries, an image's data, are left as sent), any other object part whole, as its JSON
    text: a type the proxy does not know (an Anthropic-shaped ``document`` or
    ``tool_result``, a client's own) may be text a lenient provider shows the model, and is
    stored."""
    content = msg.get("content")
    if isinstance(content, Mapping):
        read, n = _redact_value(content, patterns)
        return (msg, 0) if n == 0 else ({**msg, "content": read}, n)
    if isinstance(content, str) or not isinstance(content, Sequence):
        return msg, 0
    parts, total = list(content), 0
    for i, part in enumerate(parts):
        if isinstance(part, str) or has_text(part):
            continue
        if isinstance(part, Mapping) and str(part.get("type")) in _MEDIA:
            parts[i], n = _redact_field(part, "type", patterns)
        else:
            parts[i], n = _redact_value(part, patterns)
        total += n
    return (msg, 0) if total == 0 else ({**msg, "content": parts}, total)


def _redact_field(
    obj: Mapping[str, Any], key: str, patterns: Sequence[re.Pattern[str]]
) -> tuple[Any, int]:
    """``obj`` with its text under ``key`` redacted, and the count; ``obj`` itself when that
    is no text or nothing matched."""
    if not isinstance(obj.get(key), str):
        return obj, 0
    text, n = redact(obj[key], patterns)
    return (obj, 0) if n == 0 else ({**obj, key: text}, n)


def redact_written(msg: Message, patterns: Sequence[re.Pattern[str]]) -> tuple[Message, int]:
    """``msg`` with every text a model reads redacted, and the count: its content
    (``redact_message``, and what else of it the summary renders: ``_redact_content``), its
    refusal, its name, and the names and arguments of its tool calls or legacy
    ``function_call``.
    Ingestion redacts so what a client writes (an assistant turn too); what the model itself
    wrote is stored as the provider sent it, so what the proxy derives from stored history
    for another model (the summary's input) is redacted here. The same object comes back
    when nothing matched."""
    out, total = redact_message(msg, patterns)
    out, n = _redact_content(out, patterns)
    total += n
    # its refusal, whatever its role (``refusal`` parts are content: ``redact_message``
    # reads them), and a tool's or a participant's name, rendered too
    for key in ("refusal", "name"):
        out, n = _redact_field(out, key, patterns)
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
