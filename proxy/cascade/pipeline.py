"""The one place the cascade's stages are put in order: ``assemble`` builds the upstream prompt.

Per-step stages run here on every request, in a fixed order, each behind its own enable flag:

1. lossless eviction of old tool results (placeholders persist, so the prefix stays stable);
2. the durable summary folded into the first user message;
3. the overflow guard: drop the oldest whole rounds after the summary, or refuse.

Ingestion-time truncation and redaction run once per new message (``ingest``), not per step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.cascade.eviction import evict
from proxy.cascade.overflow import guard
from proxy.cascade.summary import fold_summary
from proxy.cascade.text import content_text
from proxy.cascade.truncation import Ingested, truncate_tool_result
from proxy.cascade.types import (
    READ_TOOL_OUTPUT,
    Budget,
    Event,
    Message,
    TokenCounter,
)
from proxy.config import ContextConfig

__all__ = [
    "StepInput", "Assembled", "assemble", "ingest", "READ_TOOL_SCHEMA",
    "COMPACT_COMMAND", "COMMAND_REPLY_PREFIX", "is_compact_command", "compact_reply_text",
    "drop_commands",
]

_HANDLE = READ_TOOL_OUTPUT + '({"id"'
GUARD_MARGIN = 1.03
"""The guard counts with the session's real/estimated ratio plus this margin: the estimate is
calibrated on whole prompts, and one step's new text can tokenise denser than the average."""
TRIM_TARGET = 0.6
"""Once the guard must trim, it trims down to this fraction of the prompt budget."""
COMPACT_COMMAND = "/compact"
COMMAND_REPLY_PREFIX = "[cascade] "

READ_TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": READ_TOOL_OUTPUT,
        "description": (
            "Read back the full text of an earlier tool result that was truncated or cleared "
            "from the context. Page with offset/limit (characters), or search it with grep."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "the tool_call_id named in the marker"},
                "offset": {"type": "integer", "minimum": 0},
                "limit": {"type": "integer", "minimum": 1},
                "grep": {"type": "string",
                         "description": "text to find, any case (a|b: either); returns lines"},
            },
            "required": ["id"],
        },
    },
}


@dataclass(frozen=True, slots=True)
class StepInput:
    window: tuple[Message, ...]
    system_count: int
    summary: str | None
    count: TokenCounter
    budget: Budget
    ctx: ContextConfig
    unspillable: frozenset[str] = frozenset()
    ratio: float = 1.0


@dataclass(frozen=True, slots=True)
class Assembled:
    messages: tuple[Message, ...]
    window: tuple[Message, ...]
    events: tuple[Event, ...]
    evicted: tuple[int, ...]
    trimmed: tuple[int, ...]
    offer_read_tool: bool
    tokens: int


def ingest(msg: Message, ctx: ContextConfig) -> Ingested:
    """Redact and truncate one newly arrived message (tool results only)."""
    return truncate_tool_result(msg, cfg=ctx.tool_output, redaction=ctx.redaction)


def _is_command(msg: Message) -> bool:
    return (
        msg.get("role") == "user"
        and content_text(msg.get("content")).strip() == COMPACT_COMMAND
    )


def is_compact_command(messages: Sequence[Message]) -> bool:
    """A chat message whose whole content is ``/compact`` asks the proxy, not the model."""
    return bool(messages) and _is_command(messages[-1])


def compact_reply_text(
    *, version: int | None, folded: int, tokens_before: int, tokens_after: int, reason: str
) -> str:
    """What the proxy answers to ``/compact``; the prefix lets later prompts drop it."""
    if version is None:
        return f"{COMMAND_REPLY_PREFIX}Nothing was compacted: {reason or 'nothing to fold'}."
    return (
        f"{COMMAND_REPLY_PREFIX}Compacted {folded} messages into summary v{version}: "
        f"the prompt went from about {tokens_before} to {tokens_after} tokens."
    )


def drop_commands(messages: Sequence[Message]) -> tuple[Message, ...]:
    """Remove ``/compact`` exchanges: they were answered by the proxy, never by the model."""
    if not any(_is_command(m) for m in messages):
        return tuple(messages)  # the common case, checked cheaply
    out: list[Message] = []
    skip_reply = False
    for m in messages:
        if _is_command(m):
            skip_reply = True
            continue
        if skip_reply and m.get("role") == "assistant" and content_text(
            m.get("content")
        ).startswith(COMMAND_REPLY_PREFIX):
            skip_reply = False
            continue
        skip_reply = False
        out.append(m)
    return tuple(out)


def _holds_handle(messages: Sequence[Message]) -> bool:
    return any(
        m.get("role") == "tool" and _HANDLE in str(m.get("content") or "") for m in messages
    )


def assemble(inp: StepInput) -> Assembled:
    """Run the per-step stages over the window and return the prompt to send upstream."""
    window = inp.window
    events: list[Event] = []
    evicted: tuple[int, ...] = ()
    if inp.ctx.eviction.enabled:
        result = evict(
            window, count=inp.count, budget=inp.budget, cfg=inp.ctx.eviction,
            persist_raw=inp.ctx.tool_output.persist_raw, unspillable=inp.unspillable,
        )
        pairs = zip(window, result.messages, strict=True)
        evicted = tuple(i for i, (a, b) in enumerate(pairs) if a != b)
        window = result.messages
        events.extend(result.events)
    messages = fold_summary(
        drop_commands(window), summary=inp.summary, system_count=inp.system_count
    )
    protected = inp.system_count + (1 if inp.summary else 0)
    guarded = guard(
        messages, count=_calibrated(inp.count, inp.ratio), limit=inp.budget.limit,
        reserved_output=inp.budget.reserved_output, protected_head=protected,
        trim_current_turn=True,
        target=int((inp.budget.limit - inp.budget.reserved_output) * TRIM_TARGET),
    )
    events.extend(guarded.events)
    trimmed: tuple[int, ...] = ()
    if guarded.dropped:  # window messages the guard dropped: the shell marks them for good
        kept = {id(m) for m in guarded.messages}
        offered = {id(m) for m in messages}
        trimmed = tuple(
            i for i, m in enumerate(window) if id(m) in offered and id(m) not in kept
        )
    offer = inp.ctx.tool_output.persist_raw and _holds_handle(guarded.messages)
    return Assembled(
        messages=guarded.messages, window=tuple(window), events=tuple(events),
        evicted=evicted, trimmed=trimmed, offer_read_tool=offer,
        tokens=inp.count(guarded.messages),
    )


def _calibrated(count: TokenCounter, ratio: float) -> TokenCounter:
    factor = max(ratio, 0.5) * GUARD_MARGIN

    def calibrated(messages: Sequence[Message], /) -> int:
        return math.ceil(count(messages) * factor)

    return calibrated
