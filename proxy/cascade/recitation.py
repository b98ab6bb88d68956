"""Recitation (DESIGN §5 stage 3): the summary's plan, recited at the tail of the prompt.

Models attend most to the end of a long prompt. When the latest summary has ``## Open Tasks``
and/or ``## Next Step``, a ``<plan>…</plan>`` block holding them is appended to the last
message of the upstream prompt, so the agent's goal sits where it is read. It is a per-turn
stage (``phases.py``): the block is made from the summary at the turn's first step and kept
with the turn, so it is byte-identical on every step of the turn even when a compaction
replaces the summary mid-turn; the next user message recites the new plan. It moves with
the tail, and everything before the tail stays a stable prefix.

The block goes into the last message only when that is a user or tool message (never a
system message, which some providers refuse at that position, nor an assistant prefill); a
list-of-parts content gets an extra text part. It is never stored: the stage marks nothing,
so the window row keeps the client's text and only the prompt carries the block.
"""

from __future__ import annotations

from proxy.cascade.briefing import section
from proxy.cascade.step import Stage, StepInput
from proxy.cascade.text import append_block, quote_closing_tag
from proxy.cascade.types import Message, StageResult

__all__ = ["PLAN_OPEN", "PLAN_CLOSE", "RECITATION", "plan_block", "recite"]

PLAN_OPEN, PLAN_CLOSE = "<plan>", "</plan>"
_RECITED = ("## Open Tasks", "## Next Step")
_QUOTED_CLOSE = "</plan-text>"
"""What a ``</plan>`` the summary quotes (a task about a template, an XML file), in any
spelling a model reads as one, reads as in the block, so it does not end the block early, as
retrieval quotes its own closing tag."""
_TARGET_ROLES = frozenset({"user", "tool"})
_EMPTY = frozenset({"", "none", "n/a", "nothing"})
"""What a section with nothing to say reads as, once its list marker, brackets and closing
full stop are gone: the fast model is asked for "(none)" and also writes "- None" or "N/A"."""


def _says_nothing(body: str) -> bool:
    text = body.strip().lower().lstrip("-*• ").strip().rstrip(".").strip()
    return text.removeprefix("(").removesuffix(")").strip() in _EMPTY


def plan_block(summary: str | None) -> str | None:
    """The ``<plan>`` block of a summary, or None when it has neither section with content."""
    if not summary or not summary.strip():
        return None
    parts = []
    for heading in _RECITED:
        body = section(summary, heading)
        if body is not None and not _says_nothing(body):
            parts.append(f"{heading}\n{body.strip()}")
    if not parts:
        return None
    inner = quote_closing_tag("\n\n".join(parts), "plan", _QUOTED_CLOSE)
    return f"{PLAN_OPEN}\n{inner}\n{PLAN_CLOSE}"


def recite(messages: tuple[Message, ...], step: StepInput) -> StageResult:
    """The stage: append the turn's plan block (``step.answers["recitation"]``, which
    ``plan_block`` made at the turn's first step) to the last message when it is a user or
    tool message; otherwise, or without a plan, pass the messages on unchanged."""
    block = step.answers.get("recitation")
    if (
        not isinstance(block, str)
        or not block
        or not messages
        or messages[-1].get("role") not in _TARGET_ROLES
    ):
        return StageResult(messages)
    return StageResult((*messages[:-1], append_block(messages[-1], block)))


def _turn_plan(step: StepInput) -> str | None:
    return plan_block(step.summary)


RECITATION = Stage(
    "recitation",
    recite,
    enabled=lambda ctx: ctx.recitation.enabled,
    per_turn=True,
    answer=_turn_plan,
)
