"""Stage 0: tool-output truncation at ingestion (``paging.py`` pages what it spills).

A tool result over ``toolOutput.maxChars`` keeps a 70% head and a 30% tail with a marker
between them. Redaction runs first, on the full text, so a secret anywhere in the output is
gone before anything is kept, spilled or forwarded. The full text is spilled
for ``read_tool_output`` only when nothing was redacted: a result that contained secrets is
never stored and its marker advertises no handle.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from proxy.cascade.lossless import compact_text, compacted_marker
from proxy.cascade.pins import names, pin
from proxy.cascade.pointers import EarlierLines
from proxy.cascade.redaction import compile_patterns, redact
from proxy.cascade.redaction_calls import redact_written
from proxy.cascade.text import content_text, with_text
from proxy.cascade.types import TRUNCATED, Event, Message, Spill
from proxy.config_context import RedactionConfig, ToolOutputConfig

__all__ = [
    "HEAD_SHARE",
    "Ingested",
    "truncate_tool_result",
    "cap_utf8",
    "is_cut_from",
    "is_cut_from_capped",
    "has_cut_marker",
    "drop_cut_handle",
]

HEAD_SHARE = 0.7
"""Share of the kept characters taken from the head; the rest comes from the tail."""


@dataclass(frozen=True, slots=True)
class Ingested:
    """A tool result as it enters the history: the message to store, events, and intents."""

    message: Message
    events: tuple[Event, ...] = ()
    spill: Spill | None = None
    redacted: int = 0


def cap_utf8(text: str, cap_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding fits ``cap_bytes`` (whole chars)."""
    if len(text) * 4 <= cap_bytes:
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= cap_bytes:
        return text
    cut = max(0, cap_bytes)
    while cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return data[:cut].decode("utf-8", "surrogatepass")


def _marker(omitted: int, *, tool_call_id: str, offset: int, handle: bool, secret: bool) -> str:
    if secret:
        return (
            f"\n[... truncated {omitted} chars (output contained secrets and was not kept; "
            "re-run the tool if you need it) ...]\n"
        )
    if not handle:
        return f"\n[... truncated {omitted} chars; re-run the tool if you need the rest ...]\n"
    args = json.dumps({"id": tool_call_id, "offset": offset, "limit": omitted})
    return f"\n[... truncated {omitted} chars; read the rest with read_tool_output({args}) ...]\n"


_CUT_OPEN = "\n[... truncated "
_ANY_MARKER = re.compile(
    r"\n\[\.\.\. truncated \d+ chars(?:; re-run the tool if you need the rest"
    r"| \(output contained secrets and was not kept; re-run the tool if you need it\)"
    r"|; read the rest with read_tool_output\(\{[^\n]*?\}\)) \.\.\.\]\n"
)
_CUT_PHRASE = " chars; read the rest with read_tool_output("
_HANDLE_MARKER = re.compile(
    r"\n\[\.\.\. truncated (\d+) chars; "
    r"read the rest with read_tool_output\((\{[^\n]*?\})\) \.\.\.\]\n"
)


def has_cut_marker(text: str) -> bool:
    """Whether ``text`` holds a marker :func:`truncate_tool_result` puts where it cut, with a
    handle or without (no copy kept: ``persistRaw`` off, or a redacted result). A client's
    own text may hold one too: what tells a cut is that the stored body is not the message
    sent (its chain hash), which only the store can say."""
    return _CUT_OPEN in text and _ANY_MARKER.search(text) is not None


def drop_cut_handle(text: str, own: str) -> str:
    """``text`` with each marker that names ``read_tool_output`` for the handle ``own``
    worded as a marker without a handle (the same count of omitted characters), for a
    prompt that goes without the tool (``handles.py``), bare or pinned (``pins.names``).
    Each marker is found from its
    handle's phrase, in one pass over the text: it runs on every such request."""
    out: list[str] = []
    done = 0
    at = text.find(_CUT_PHRASE)
    while at >= 0:
        start = text.rfind(_CUT_OPEN, max(done, at - len(_CUT_OPEN) - 20), at)  # digits
        m = _HANDLE_MARKER.match(text, start) if start >= 0 else None
        if m is not None and _names(m[2], own):
            out += (
                text[done:start],
                _marker(int(m[1]), tool_call_id=own, offset=0, handle=False, secret=False),
            )
            done = m.end()
        at = text.find(_CUT_PHRASE, max(at + 1, done))
    return "".join((*out, text[done:])) if out else text


def _names(args_json: str, own: str) -> bool:
    try:
        args = json.loads(args_json)
    except (ValueError, RecursionError):  # no JSON, or a client's nested past the recursion limit
        return False
    return isinstance(args, dict) and names(args.get("id"), own)


def _cut_markers(text: str) -> Iterator[tuple[re.Match[str], int, int]]:
    """Each handle marker in ``text`` whose arguments hold an int offset and the limit its
    "truncated N chars" says: (the match, offset, limit)."""
    for m in _HANDLE_MARKER.finditer(text):
        try:
            args = json.loads(m[2])
        except (ValueError, RecursionError):  # a client's text: nested past the limit too
            continue
        offset, limit = args.get("offset"), args.get("limit")
        if isinstance(offset, int) and isinstance(limit, int) and limit == int(m[1]):
            yield m, offset, limit


def is_cut_from(text: str, raw: str) -> bool:
    """Whether ``text`` is ``raw`` cut by :func:`truncate_tool_result` with a handle: the
    head of ``raw``, the marker, the tail of ``raw``, where the marker's offset and limit
    say. It links a cut result to its own spill when the hash chain cannot (a result sent
    as a list of content parts, whose spill is only its text)."""
    for m, offset, limit in _cut_markers(text):
        if 0 <= offset <= offset + limit <= len(raw) and (
            text == raw[:offset] + m[0] + raw[offset + limit :]
        ):
            return True
    return False


def is_cut_from_capped(text: str, capped: str) -> bool:
    """Whether ``text`` can be a cut (:func:`is_cut_from`) of a result whose spill was capped
    to ``capped``, a prefix of it (``cap_utf8``): the head the marker's offset says agrees
    with ``capped``, and so does the tail where ``capped`` reaches past the omitted part.
    It links a cut result to its own capped spill, which the hash chain cannot."""
    for m, offset, limit in _cut_markers(text):
        head, tail, rest = text[: m.start()], text[m.end() :], capped[offset + limit :]
        if (
            len(head) == offset
            and capped[:offset] == head[: len(capped)]
            and (tail.startswith(rest))
        ):
            return True
    return False


def _compact(
    msg: Message,
    text: str,
    cfg: ToolOutputConfig,
    earlier: Callable[[], EarlierLines],
    handle: str,
    patterns: Sequence[re.Pattern[str]] = (),
) -> Ingested | None:
    """The lossless ingest stage (``lossless.py``): the compacted result with its original
    spilled, or None when nothing applies, the saving is under ``compact_min_saving`` of the
    original, the original is over ``raw_cap_bytes`` (the copy the marker promises would
    hold only its head), the compacted text would still be truncated (its offsets would then not be
    positions in the spill; with the cut off, ``cfg.enabled`` false, nothing is), or one of
    the redaction ``patterns`` matches the compacted text: a pattern written for compact
    JSON misses the pretty-printed original, and the rewrite must not spell out what it
    forbids. Its marker names ``handle`` (``_handle``)."""
    tool_call_id = str(msg.get("tool_call_id") or "")
    if not text or not tool_call_id or cap_utf8(text, cfg.raw_cap_bytes) is not text:
        return None  # a copy capped at ``raw_cap_bytes`` is no exact original
    done = compact_text(text, earlier() if "\n" in text else EarlierLines())
    if done is None:
        return None
    new_text = compacted_marker(handle, len(text), done.how) + done.text
    saving = len(text) - len(new_text)
    too_long = cfg.enabled and len(new_text) > cfg.max_chars
    if too_long or saving <= 0 or saving < cfg.compact_min_saving * len(text):
        return None
    if patterns and redact(done.text, patterns)[1]:
        return None
    event = Event(
        TRUNCATED,
        {
            "tool_call_id": tool_call_id,
            "handle": handle,
            "original_chars": len(text),
            "kept_chars": len(new_text),
            "spilled": True,
            "compacted": done.how,
        },
    )
    content = with_text(msg.get("content"), new_text)
    return Ingested({**msg, "content": content}, (event,), Spill(tool_call_id, text))


def _handle(tool_call_id: str, pos: int | None) -> str:
    """The handle a marker names: the result's ``pins.pin`` when its history position is
    known (``pins.py``: a bare id reads whatever result came under it last), else the id."""
    return tool_call_id if pos is None or not tool_call_id else pin(tool_call_id, pos)


def truncate_tool_result(
    msg: Message,
    *,
    cfg: ToolOutputConfig,
    redaction: RedactionConfig,
    earlier: Callable[[], EarlierLines] = EarlierLines,
    pos: int | None = None,
) -> Ingested:
    """Redact, then cut an over-long tool result to head + marker + tail.

    Invariants: the result's content is at most ``cfg.max_chars`` characters (unless the
    marker alone is longer, or the cut is off: ``cfg.enabled`` false); the marker's
    offset/limit are character positions in the redacted full text, which is exactly what
    the spill holds (the store caps it); nothing is spilled when anything was redacted.
    Non-tool messages and short results are only redacted, and come back as the same
    object when nothing changed.

    Before any cut, a result that is spillable (nothing redacted, ``persist_raw``) is
    compacted losslessly when ``cfg.compact`` (``_compact``); ``earlier`` gives the
    session's earlier tool results for pointers, and is only called when needed.

    ``pos`` is the result's position in the session's history: the marker's handle (cut or
    compacted) then names this result alone (``pins.pin``). Without it (an observation,
    whose handle is a hash of its text) the marker names the bare id. The spill is keyed by
    the bare id either way; the ``context.truncated`` event has both, ``tool_call_id`` and
    the ``handle`` the marker names (as ``context.evicted``'s ``handles``), since an id a
    client reuses (``call_0`` every turn) does not tell its results apart.
    """
    redacted = 0
    patterns: tuple[re.Pattern[str], ...] = ()
    if redaction.enabled:
        patterns = compile_patterns(redaction.patterns, use_defaults=redaction.default_patterns)
        msg, redacted = redact_written(msg, patterns)
    if msg.get("role") != "tool":
        return Ingested(msg, redacted=redacted)
    text = content_text(msg.get("content"))
    if cfg.compact and cfg.persist_raw and redacted == 0:
        pinned = _handle(str(msg.get("tool_call_id") or ""), pos)
        compacted = _compact(msg, text, cfg, earlier, pinned, patterns)
        if compacted is not None:
            return compacted
    if not cfg.enabled or len(text) <= cfg.max_chars:
        return Ingested(msg, redacted=redacted)

    tool_call_id = str(msg.get("tool_call_id") or "")
    named = _handle(tool_call_id, pos)
    secret = redacted > 0
    handle = cfg.persist_raw and not secret and bool(tool_call_id)
    total = len(text)
    worst = _marker(total, tool_call_id=named, offset=total, handle=handle, secret=secret)
    keep = max(0, cfg.max_chars - len(worst))
    head_len = int(keep * HEAD_SHARE)
    tail_len = keep - head_len
    omitted = total - head_len - tail_len
    marker = _marker(omitted, tool_call_id=named, offset=head_len, handle=handle, secret=secret)
    new_text = text[:head_len] + marker + text[total - tail_len :]
    # The full text: the store caps it at raw_cap_bytes and records the original size.
    spill = Spill(tool_call_id, text) if handle else None
    event = Event(
        TRUNCATED,
        {
            "tool_call_id": tool_call_id,
            "handle": named,
            "original_chars": total,
            "kept_chars": head_len + tail_len,
            "spilled": spill is not None,
        },
    )
    content = with_text(msg.get("content"), new_text)
    return Ingested({**msg, "content": content}, (event,), spill, redacted)
