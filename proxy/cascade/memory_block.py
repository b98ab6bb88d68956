"""The ``memory`` stage: stored facts as a ``<memory>`` block in the leading system message.

The facts of the session's agent scope and of ``global`` are rendered by the shell's
fulfiller (``services/needs.memory_block``). It is a per-turn stage (``phases.py``): the
block is fetched at the turn's first step (a new user message) and kept with the turn, and
every later step of the turn sends the same bytes without reading the facts. So the block
changes only at a turn boundary, and only when the facts did: the prompt prefix a provider
caches stays put through an agent's tool loop. The one exception is a deleted fact: the
deletion clears the kept block of the turns that show it (``store.memory.delete_fact``),
so their next step fetches the block again, without it.

This stage only places the text: appended to the first message when it is a system or
developer message (a new text part when its content is a list of parts), or, when the
prompt starts with neither, as a system message of its own at the top (sent as a user
message to a model that takes no system message: ``services/system_role.py``). The window
is not touched, so the block is never stored as a message a client sent. A first message that
already holds a block this stage rendered (a client that resends the prompt it was sent)
has it replaced where it stands by the current one, or left out with no block to send (a
first message that is the block alone, the proxy's own system message resent, with it; so
is a first user message that is the block alone, as that model was sent it): it
would otherwise pile up by one a request, or, once a fact changed, keep a deleted fact
beside the block that dropped it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.cascade.memory import fact_key
from proxy.cascade.overflow import block_room, guard_factor
from proxy.cascade.step import Stage, StepInput
from proxy.cascade.text import append_block, quote_closing_tag, whole_block
from proxy.cascade.types import LEADING_ROLES, Marks, Message, StageResult
from proxy.config_context import ContextConfig

__all__ = [
    "MEMORY_MAX_TOKENS",
    "MEMORY_BUDGET_SHARE",
    "FACTOR_STEP",
    "MemoryNeed",
    "STEP_HYSTERESIS",
    "stepped_factor",
    "factor_step",
    "memory_rows",
    "memory_lines",
    "memory_line",
    "render_memory",
    "add_memory",
    "MEMORY",
]

MEMORY_MAX_TOKENS = 1000
"""The block's cap, in tokens of the session's tokenizer (four characters each without one):
facts past it (the newest, since facts are kept in the order they were stored) are left
out."""
MEMORY_BUDGET_SHARE = 0.25
"""A small model's cap: this share of its prompt budget (limit minus reserved output) when
that is less than :data:`MEMORY_MAX_TOKENS`, so a full memory, which the overflow guard
leaves out only as a last resort (it heads the prompt), leaves a short request room."""
FACTOR_STEP = 1.25
"""The share is the provider's tokens, turned into estimate tokens with the guard's factor
(``guard_factor``) rounded up to a power of this step: the ratio moves with every reply, and
a cut that followed each move would drop or take back a full block's last fact at a turn's
start (a miss of the whole prompt). Rounded up, the block stays within its share; it moves
only when the ratio crosses a step (downwards, clearly: :func:`factor_step`), and fills at
least ``FACTOR_STEP ** -(1 + STEP_HYSTERESIS)`` of the share."""

STEP_HYSTERESIS = 0.5
"""How far below the last turn's step (a share of a step, on the log scale) the ratio must
fall before the cap grows back a step (:func:`factor_step`)."""

MEMORY_NAME = "memory"

_HEAD = (
    "<memory>\nRemembered facts (added by a user or drawn from earlier conversations); "
    "use them where they apply:\n"
)
"""One header for every block, true of a fact a person added or accepted and of one ``auto``
promotion stored unseen (a fact's stored ``source_session`` does not tell them apart: an
accepted suggestion has one too)."""
_TAIL = "</memory>"


_QUOTED_CLOSE = "</memory-text>"
"""What a closing tag in a stored fact reads as in the block, so it does not end the block
early (``sanitize_fact`` refuses one; a row stored before that rule is rendered as stored),
as recitation quotes its ``</plan>``. A fact written with compatibility forms (fullwidth
``＜／ｍｅｍｏｒｙ＞``) is read in its compatibility form for this, as the model reads it."""


def _quoted(fact: str) -> str:
    return quote_closing_tag(fact, "memory", _QUOTED_CLOSE)


def _quarter_chars(text: str) -> int:
    return math.ceil(len(text) / 4)


@dataclass(frozen=True, slots=True)
class MemoryNeed:
    """The rendered block of the session's facts, at most ``max_tokens`` as ``tokens``
    counts a text (``None``: no facts); asked for at a turn's first step only."""

    max_tokens: int = MEMORY_MAX_TOKENS
    tokens: Callable[[str], int] | None = field(default=None, compare=False)


def memory_rows(max_tokens: int) -> int:
    """How many of the session's facts, oldest first, a block of ``max_tokens`` can use, so
    a turn reads that many rows and not the scope's whole list (an ``auto`` scope grows
    with every compaction). A listed fact costs at least one token, so at most
    ``max_tokens`` fit; each scope refuses a fact it already holds (as the block compares
    them), so a fact comes at most twice (``global`` and the agent's scope), and the fact
    that does not fit is one more: within twice the cap plus two rows the block is cut. A
    read of that many that the block does not fill is read on (rows a scope holds twice,
    stored before its check compared them as it does now)."""
    return 2 * max_tokens + 2


def memory_lines(
    facts: Sequence[str],
    *,
    max_tokens: int = MEMORY_MAX_TOKENS,
    tokens: Callable[[str], int] | None = None,
) -> tuple[list[str], bool]:
    """The block's lines for ``facts`` (:func:`render_memory`), and whether a fact was cut
    (the block is full, so facts after those given would not show)."""
    cost = tokens or _quarter_chars
    budget = max_tokens - cost(_HEAD) - cost(_TAIL)
    lines: list[str] = []
    seen: set[str] = set()
    for fact in facts:
        key = fact_key(fact)
        if key in seen:
            continue
        seen.add(key)
        line = memory_line(fact)
        size = cost(line)
        if size > budget:
            return lines, True
        budget -= size
        lines.append(line)
    return lines, False


def memory_line(fact: str) -> str:
    """The line that lists ``fact`` in a block: every line of a block follows a line
    break, so ``"\\n" + memory_line(fact)`` is in a block that lists the fact, and in no
    other (``store.memory.delete_fact`` finds the turns that show a fact so)."""
    return f"- {_quoted(fact)}\n"


def render_memory(
    facts: Sequence[str],
    *,
    max_tokens: int = MEMORY_MAX_TOKENS,
    tokens: Callable[[str], int] | None = None,
) -> str | None:
    """The block for ``facts`` in their stored order, cut at ``max_tokens`` as ``tokens``
    counts each line (four characters a token when ``None``); ``None`` when no fact fits.

    A fact stored in both ``global`` and the agent's scope (each scope checks duplicates
    only within itself) is listed once, where it first comes, compared as the per-scope
    check compares (:func:`~proxy.cascade.memory.fact_key`)."""
    lines, _ = memory_lines(facts, max_tokens=max_tokens, tokens=tokens)
    return _HEAD + "".join(lines) + _TAIL if lines else None


def plan_memory(step: StepInput) -> MemoryNeed:
    """The block's cap and counter, by the session's estimate without its real/estimated
    ratio: the ratio moves with every reply, and a cut that moved with it would rewrite the
    block, at the head of the prompt, at a turn's start (a miss of the whole prompt). A small
    model's share of its budget, which is the provider's tokens, is turned into estimate
    tokens with the guard's factor rounded up (``stepped_factor``), so a cut at that share
    stays within it and moves only when the ratio crosses a step; the guard, counting with
    the ratio, still leaves the block out of a prompt that cannot fit it."""
    share, tokens = block_room(step, MEMORY_BUDGET_SHARE, "system", calibrated=False)
    factor = FACTOR_STEP ** _turn_step(step)
    return MemoryNeed(min(MEMORY_MAX_TOKENS, int(share / factor)), tokens)


def stepped_factor(ratio: float) -> float:
    """``guard_factor(ratio)`` rounded up to a power of :data:`FACTOR_STEP`."""
    return float(FACTOR_STEP ** factor_step(ratio))


def factor_step(ratio: float, previous: int | None = None) -> int:
    """The power of :data:`FACTOR_STEP` that ``guard_factor(ratio)`` rounds up to, held at
    the ``previous`` turn's while the ratio is less than :data:`STEP_HYSTERESIS` of a step
    below it: a ratio that moves about a step's edge (it moves with every reply) would
    otherwise move the cap, and the block at the prompt's head, at every turn. A step up
    (the cap shrinks) is taken at once, so the block stays within its share."""
    exact = math.log(guard_factor(ratio), FACTOR_STEP)
    up = math.ceil(round(exact, 9))
    if previous is not None and up < previous and exact > previous - 1 - STEP_HYSTERESIS:
        return previous
    return up


def _turn_step(step: StepInput) -> int:
    """This turn's :func:`factor_step`, from the step the session's last turn kept."""
    kept = step.previous.get(MEMORY_NAME)
    previous = kept.get("step") if isinstance(kept, Mapping) else None
    return factor_step(step.ratio, previous if type(previous) is int else None)


def _turn_answer(step: StepInput) -> dict[str, Any]:
    """What the turn keeps: the block, and the step its cap was cut at (:func:`factor_step`),
    which the next turn starts from."""
    return {"block": _block_of(step.answers.get(MEMORY_NAME)), "step": _turn_step(step)}


def _block_of(answer: Any) -> str | None:
    block = answer.get("block") if isinstance(answer, Mapping) else answer
    return block if isinstance(block, str) and block else None


def add_memory(messages: tuple[Message, ...], step: StepInput) -> StageResult:
    resent = 0  # the proxy's own, as user messages: as a system one alone, all at once
    while resent < len(messages) and _resent_as_user(messages[resent]):
        resent += 1
    if not resent:
        return _added(messages, step)
    after = _added(messages[resent:], step)
    source = after.marks.source or tuple(range(len(after.messages)))
    shifted = tuple(None if i is None else i + resent for i in source)
    return replace(after, marks=replace(after.marks, source=shifted))


def _added(messages: tuple[Message, ...], step: StepInput) -> StageResult:
    block = _block_of(step.answers.get(MEMORY_NAME))
    if messages and messages[0].get("role") in LEADING_ROLES:
        first = _replaced(messages[0], block)  # a client that resent the prompt it was sent
        if first is None:
            first = messages[0] if block is None else append_block(messages[0], block)
        elif not first.get("content"):  # the block alone, none to send: not sent empty
            rest = tuple(range(1, len(messages)))
            return StageResult(messages[1:], marks=Marks(source=rest))
        return StageResult((first, *messages[1:]))
    if block is None:
        return StageResult(messages)
    source = (None, *range(len(messages)))
    return StageResult(
        ({"role": "system", "content": block}, *messages), marks=Marks(source=source)
    )


def _resent_as_user(msg: Message) -> bool:
    """Whether ``msg`` is a block this stage rendered, alone, as a user message: the one a
    model that takes no system message was sent in place of the system message of its own
    (``services/system_role.py``), resent."""
    return msg.get("role") == "user" and whole_block(msg.get("content"), _HEAD, _TAIL)


def _replaced(msg: Message, block: str | None) -> Message | None:
    """``msg`` with the last block this stage rendered (``render_memory``) in it replaced by
    ``block`` where it stands, or left out when ``block`` is None; None when it holds none.
    A fact's closing tag is quoted, so the first ``</memory>`` after the header ends it."""
    content = msg.get("content")
    if isinstance(content, list):
        for i in range(len(content) - 1, -1, -1):
            part = content[i]
            if (
                isinstance(part, dict)
                and part.get("type") == "text"
                and whole_block(part.get("text"), _HEAD, _TAIL)
            ):
                new = [] if block is None else [{"type": "text", "text": block}]
                return {**msg, "content": [*content[:i], *new, *content[i + 1 :]]}
        return None
    if not isinstance(content, str):
        return None
    at = content.rfind(_HEAD)
    end = content.find(_TAIL, at) + len(_TAIL)
    if at < 0 or end < len(_TAIL) or (at and not content[:at].endswith("\n\n")):
        return None
    if block is not None:
        return {**msg, "content": content[:at] + block + content[end:]}
    rest = content[end:]
    head = content[: max(at - 2, 0)]
    return {**msg, "content": head + rest if head else rest.removeprefix("\n\n")}


def _injects(ctx: ContextConfig) -> bool:
    """Memory is opt-in, as every stage past the default three: with
    ``memoryPromotion.mode`` off, no fact is read and a step costs no statement for it."""
    return ctx.memory_promotion.mode != "off"


MEMORY = Stage(
    MEMORY_NAME,
    add_memory,
    enabled=_injects,
    plan=plan_memory,
    per_turn=True,
    answer=_turn_answer,
)
