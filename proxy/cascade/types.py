"""Shared value types of the pure core, and every event name in one place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "Message",
    "LEADING_ROLES",
    "TokenCounter",
    "Budget",
    "Event",
    "Spill",
    "Marks",
    "NO_MARKS",
    "StageResult",
    "CompactionPlan",
    "ContextLengthExceeded",
    "USAGE",
    "TRUNCATED",
    "EVICTED",
    "COMPACTION_STARTED",
    "COMPACTION_COMPLETED",
    "COMPACTION_FAILED",
    "TRIMMED",
    "HANDOFF_SUGGESTED",
    "RETRIEVAL",
    "MEMORY_SUGGESTION",
    "MESSAGE_APPENDED",
    "MESSAGE_DELTA_APPENDED",
    "CONFIG_RELOADED",
    "CONFIG_REJECTED",
    "SESSION_RESET",
    "TRANSIENT_EVENTS",
    "READ_TOOL_OUTPUT",
]

Message = Mapping[str, Any]
"""An OpenAI chat message dict. Stages never mutate one; they build new dicts."""

LEADING_ROLES = frozenset({"system", "developer"})
"""The roles of a prompt's leading instructions (``developer`` is OpenAI's newer name for
``system``): kept verbatim ahead of a summary, joined by the ``<memory>`` block, named as
such by the overflow guard, and part of an automatic session id."""


class TokenCounter(Protocol):
    """Counts the prompt tokens of a list of messages (estimate or real BPE)."""

    def __call__(self, messages: Sequence[Message], /) -> int: ...


@dataclass(frozen=True, slots=True)
class Budget:
    """The model's context limit, the tokens reserved for output, and current occupancy.
    ``fixed`` is the part of ``reserved_output`` the request's tools and response schema
    take: not output, so a refusal names it apart."""

    limit: int
    reserved_output: int
    occupancy: int
    fixed: int = 0

    @property
    def fraction(self) -> float:
        return self.occupancy / self.limit if self.limit else 0.0


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Spill:
    """Intent: persist the full (already redacted) text of a tool result."""

    tool_call_id: str
    text: str


@dataclass(frozen=True, slots=True)
class Marks:
    """What a stage did that the shell must persist, in indices of the messages it was given.

    - ``evicted``: messages replaced in place by a placeholder; the shell stores the
      placeholder beside the row, so every later prompt sends the same prefix;
    - ``trimmed``: messages left out of this and every later prompt (the rows stay);
    - ``source``: for each output message, the input index it came from, or None for a block
      the stage injected. None (the default) means "one for one": same length, same order;
    - ``dropped_blocks``: the per-turn stages whose block the overflow guard left out; the
      turn keeps them out on its later steps too, so its prompt stays byte-stable.

    A stage that leaves messages out without marking them trimmed (``/compact`` exchanges)
    only changes ``source``: nothing is persisted for them.
    """

    evicted: tuple[int, ...] = ()
    trimmed: tuple[int, ...] = ()
    source: tuple[int | None, ...] | None = None
    dropped_blocks: tuple[str, ...] = ()


NO_MARKS = Marks()


@dataclass(frozen=True, slots=True)
class StageResult:
    """A stage's output: the messages it passes on, its events, and what the shell persists."""

    messages: tuple[Message, ...]
    events: tuple[Event, ...] = ()
    marks: Marks = NO_MARKS


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """Intent: fold ``messages[start:end]`` (absolute positions) with ``previous`` summary."""

    start: int
    end: int
    span: tuple[Message, ...]
    previous: str | None


class ContextLengthExceeded(Exception):  # noqa: N818 - OpenAI-visible name
    """A single message cannot fit the model's window; the request must not be sent."""

    status_code = 400
    type = "invalid_request_error"
    code = "context_length_exceeded"


READ_TOOL_OUTPUT = "read_tool_output"

USAGE = "context.usage"
TRUNCATED = "context.truncated"
EVICTED = "context.evicted"
COMPACTION_STARTED = "context.compaction.started"
COMPACTION_COMPLETED = "context.compaction.completed"
COMPACTION_FAILED = "context.compaction.failed"
TRIMMED = "context.trimmed"
HANDOFF_SUGGESTED = "context.handoff_suggested"
RETRIEVAL = "context.retrieval"
MEMORY_SUGGESTION = "memory.suggestion"
MESSAGE_APPENDED = "session.message.appended"
MESSAGE_DELTA_APPENDED = "session.message.delta.appended"
SESSION_RESET = "session.reset"
CONFIG_RELOADED = "config.reloaded"
CONFIG_REJECTED = "config.rejected"

TRANSIENT_EVENTS = frozenset({EVICTED, HANDOFF_SUGGESTED, MESSAGE_DELTA_APPENDED, SESSION_RESET})
"""Events that are delivered live but never persisted (no ``id:``, no replay)."""
