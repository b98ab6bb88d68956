"""Recitation (DESIGN §5 stage 3): the summary's plan, recited at the tail of the prompt.

Models attend most to the end of a long prompt. When the latest summary has ``## Open Tasks``
and/or ``## Next Step``, a ``<plan>…</plan>`` block holding them is appended to the last
message of the upstream prompt, so the agent's goal sits where it is read. It is a per-turn
stage (``phases.py``): the block is made from the summary at the turn's first step and kept
with the turn, so it is byte-identical on every step of the turn, until the next user
message or a new summary, whichever comes first (``Stage.made_of``). A new summary rewrites
the head of the prompt (it is folded into the first user message), so no cached prefix
outlives it and a plan made again then costs nothing more; between summaries the block keeps
its bytes. So a tool loop that outlives its summary recites the new plan, not the one the
summary replaced, and a session that is one long tool loop (one user message, or none)
recites the plan of its first summary. It moves with the tail, and everything before the
tail stays a stable prefix.

The block is a copy of what the summary at the head of the prompt already says, so it gets
a small share of the prompt budget (:data:`RECITATION_BUDGET_SHARE`): the overflow guard drops
the client's older rounds, for good, before it leaves an optional block out, and a long
plan would cost them for a reminder. Past the cap the last open tasks give way to a line
saying how many more the summary lists, and the next step always stays; a plan whose next
step alone does not fit is not recited.

The block goes into the last message only when that is a user or tool message (never a
system message, which some providers refuse at that position, nor an assistant prefill); a
list-of-parts content gets an extra text part. It is never stored: the stage marks nothing,
so the window row keeps the client's text and only the prompt carries the block. A client
that resends the prompt it was sent holds a block in each user or tool message that was the
tail at a step: a whole block as this stage renders it, ending such a message (not the last,
nor the turn's user message), is left out of the prompt (the row keeps it), so the prompt
recites one plan and does not grow by one a step. The turn's user message is the client's
new text, which the proxy sent with the turn's own block alone: only that block, byte for
byte, goes from it (a plan in the proxy's form that the user wrote stays on every step of the
turn), unless the turn has none (the guard left it out, or the summary has no plan), when the
form tells. The last message is the client's new text too: a plan in it stays.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from proxy.cascade.briefing import says_nothing, section
from proxy.cascade.overflow import block_room
from proxy.cascade.phases import turn_start
from proxy.cascade.step import Stage, StepInput
from proxy.cascade.text import append_block, quote_closing_tag, remove_block, whole_block
from proxy.cascade.types import Message, StageResult

__all__ = [
    "PLAN_OPEN",
    "PLAN_CLOSE",
    "RECITATION",
    "RECITATION_BUDGET_SHARE",
    "plan_block",
    "recite",
]

PLAN_OPEN, PLAN_CLOSE = "<plan>", "</plan>"
_RECITED = ("## Open Tasks", "## Next Step")
_QUOTED_CLOSE = "</plan-text>"
"""What a ``</plan>`` the summary quotes (a task about a template, an XML file), in any
spelling a model reads as one, reads as in the block, so it does not end the block early, as
retrieval quotes its own closing tag."""
_TARGET_ROLES = frozenset({"user", "tool"})
RECITATION_BUDGET_SHARE = 0.1
"""The block's cap: this share of the prompt budget (limit minus reserved output), less than
retrieval's and memory's quarter since it repeats what the summary says (module
docstring)."""


def _render(sections: dict[str, list[str]], cut: int) -> str:
    parts = []
    for heading, lines in sections.items():
        if heading == _RECITED[0] and cut:
            kept = lines[: len(lines) - cut]
            lines = [*kept, f"- … and {cut} more open task lines (see the summary)"]
        parts.append(f"{heading}\n" + "\n".join(lines))
    inner = quote_closing_tag("\n\n".join(parts), "plan", _QUOTED_CLOSE)
    return f"{PLAN_OPEN}\n{inner}\n{PLAN_CLOSE}"


def plan_block(
    summary: str | None,
    *,
    max_tokens: int | None = None,
    tokens: Callable[[str], int] | None = None,
) -> str | None:
    """The ``<plan>`` block of a summary, or None when it has neither section with content;
    with ``max_tokens`` (as ``tokens`` counts a text), the last open task lines give way to
    a line saying how many more there are until it fits (the next step alone when even that
    line does not), and None when the next step alone does not fit."""
    if not summary or not summary.strip():
        return None
    sections: dict[str, list[str]] = {}
    for heading in _RECITED:
        body = section(summary, heading)
        if body is not None and not says_nothing(body):
            sections[heading] = body.strip().splitlines()
    if not sections:
        return None
    block = _render(sections, 0)
    if max_tokens is None or tokens is None:
        return block
    tasks = len(sections.get(_RECITED[0], ()))
    if tokens(block) <= max_tokens:
        return block
    # the fewest lines cut that fit, found by halving (each count reads the whole block);
    # only a block counted to fit is returned
    lo, hi = 0, tasks  # cutting lo does not fit; cutting hi is yet to be tried
    if tasks and tokens(block := _render(sections, hi)) <= max_tokens:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if tokens(candidate := _render(sections, mid)) <= max_tokens:
                hi, block = mid, candidate
            else:
                lo = mid
        return block
    if tasks and _RECITED[1] in sections:  # the line counting the tasks is left out too
        block = _render({_RECITED[1]: sections[_RECITED[1]]}, 0)
        if tokens(block) <= max_tokens:
            return block
    return None


def recite(messages: tuple[Message, ...], step: StepInput) -> StageResult:
    """The stage: append the turn's plan block (``step.answers["recitation"]``, which
    ``plan_block`` made at the turn's first step) to the last message when it is a user or
    tool message; otherwise, or without a plan, pass the messages on. Either way a plan a
    view-resending client holds from an earlier step is left out (``_unrecited``), from the
    messages before the last: the last is the client's new text, never one the proxy sent, so
    a plan in it is the user's own, read as written (the turn's block byte for byte there is
    not added twice), and so is the turn's user message, which loses only the turn's block
    byte for byte when the turn has one (module docstring). A session without a summary has
    had no plan recited, so none goes."""
    block = step.answers.get("recitation")
    out = messages
    if step.summary is not None:  # without one no plan was recited: every block is the user's
        turn = turn_start(messages, step.ctx.observations.user_prefixes)
        own = block if isinstance(block, str) and block else None
        out = (
            *(
                _unrecited(m) if i != turn or own is None else _without(m, own)
                for i, m in enumerate(messages[:-1])
            ),
            *messages[-1:],
        )
    if (
        not isinstance(block, str)
        or not block
        or not out
        or out[-1].get("role") not in _TARGET_ROLES
        or _ends_with(out[-1], block)  # the turn's own block, resent: not doubled
    ):
        return StageResult(out)
    return StageResult((*out[:-1], append_block(out[-1], block)))


def _ends_with(msg: Message, block: str) -> bool:
    """Whether ``msg`` ends with ``block`` as :func:`append_block` puts it there."""
    content = msg.get("content")
    if isinstance(content, list):
        return bool(content) and content[-1] == {"type": "text", "text": block}
    return isinstance(content, str) and (content == block or content.endswith("\n\n" + block))


def _without(msg: Message, block: str) -> Message:
    """``msg`` without ``block`` where :func:`append_block` put it, ending it; else ``msg``."""
    stripped = remove_block(msg, block) if _ends_with(msg, block) else None
    return msg if stripped is None else stripped


def _unrecited(msg: Message) -> Message:
    """``msg`` without a plan block the stage appended to it at an earlier step, which a
    client that resends the prompt it was sent holds (module docstring); else ``msg``."""
    if msg.get("role") not in _TARGET_ROLES:
        return msg
    content = msg.get("content")
    if isinstance(content, list):
        last = content[-1] if content else None
        if isinstance(last, dict) and last.get("type") == "text" and _recited(last.get("text")):
            return {**msg, "content": content[:-1]}
        return msg
    if not isinstance(content, str) or not content.endswith("\n" + PLAN_CLOSE):
        return msg
    at = content.rfind("\n\n" + PLAN_OPEN + "\n")  # -1: the block alone, or none
    block = content[at + 2 :] if at >= 0 else content
    return {**msg, "content": content[: max(at, 0)]} if _recited(block) else msg


def _recited(text: object) -> bool:
    """Whether ``text`` is a whole block this stage renders (``_render``): the summary's
    closing tags in it are quoted, so its only ``</plan>`` ends it."""
    heads = tuple(f"{PLAN_OPEN}\n{h}\n" for h in _RECITED)
    return whole_block(text, heads, PLAN_CLOSE) and text.endswith("\n" + PLAN_CLOSE)


def _turn_plan(step: StepInput) -> str | None:
    """The turn's block, its cap counted as the guard counts (``block_room``)."""
    cap, tokens = block_room(step, RECITATION_BUDGET_SHARE, "user")
    return plan_block(step.summary, max_tokens=cap, tokens=tokens)


def _summary_digest(step: StepInput) -> str:
    """What the turn's plan is made from: the summary, as a short digest ("" for none). A
    new one makes the turn's plan again (module docstring)."""
    text = step.summary or ""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16] if text else ""


RECITATION = Stage(
    "recitation",
    recite,
    enabled=lambda ctx: ctx.recitation.enabled,
    per_turn=True,
    answer=_turn_plan,
    made_of=_summary_digest,
)
