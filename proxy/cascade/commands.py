"""``/compact`` sent as a chat message: recognised here, answered by the proxy, kept out of prompts.

A user message whose whole content is ``/compact`` asks the proxy, not the model; the proxy's
reply starts with ``COMMAND_REPLY_PREFIX`` so later prompts can drop the exchange (the
``commands`` stage) while the history keeps it.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.cascade.step import Stage, StepInput
from proxy.cascade.text import content_text
from proxy.cascade.types import Marks, Message, StageResult

__all__ = [
    "COMPACT_COMMAND",
    "COMMAND_REPLY_PREFIX",
    "COMMANDS",
    "is_compact_command",
    "is_command_exchange",
    "compact_reply_text",
    "drop_commands",
    "kept_positions",
]

COMPACT_COMMAND = "/compact"
COMMAND_REPLY_PREFIX = "[cascade] "


def _is_command(msg: Message) -> bool:
    return msg.get("role") == "user" and content_text(msg.get("content")).strip() == COMPACT_COMMAND


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


def _is_reply(msg: Message) -> bool:
    """An assistant message with the proxy's prefix: the answer to a ``/compact`` before it."""
    return msg.get("role") == "assistant" and content_text(msg.get("content")).startswith(
        COMMAND_REPLY_PREFIX
    )


def is_command_exchange(msg: Message) -> bool:
    """``msg`` on its own reads as half of a ``/compact`` exchange: the command, or a reply
    with the proxy's prefix. Retrieval leaves such messages unembedded, as every prompt
    leaves the exchange out; judged without its neighbour, a model's own reply that opens
    with the prefix would be left unsearched too, a loss no prompt notices."""
    return _is_command(msg) or _is_reply(msg)


def _kept(messages: Sequence[Message]) -> list[int] | None:
    """Indices of the messages that are not part of a ``/compact`` exchange; None: all."""
    if not any(_is_command(m) for m in messages):
        return None  # the common case, checked cheaply
    out: list[int] = []
    skip_reply = False
    for i, m in enumerate(messages):
        if _is_command(m):
            skip_reply = True
            continue
        if skip_reply and _is_reply(m):
            skip_reply = False
            continue
        skip_reply = False
        out.append(i)
    return out


def kept_positions(messages: Sequence[Message], positions: Sequence[int]) -> tuple[int, ...]:
    """``positions`` (one per message) of the messages a prompt keeps: a ``/compact``
    exchange is in the history but in no prompt."""
    kept = _kept(messages)
    return tuple(positions) if kept is None else tuple(positions[i] for i in kept)


def drop_commands(messages: Sequence[Message]) -> tuple[Message, ...]:
    """Remove ``/compact`` exchanges: they were answered by the proxy, never by the model."""
    kept = _kept(messages)
    return tuple(messages) if kept is None else tuple(messages[i] for i in kept)


def without_commands(messages: tuple[Message, ...], step: StepInput) -> StageResult:
    """The stage: leave ``/compact`` exchanges out of the prompt (not trimmed: they stay
    in the history, and every later prompt leaves them out again)."""
    kept = _kept(messages)
    if kept is None:
        return StageResult(messages)
    return StageResult(tuple(messages[i] for i in kept), marks=Marks(source=tuple(kept)))


COMMANDS = Stage("commands", without_commands)
