"""The overflow guard (DESIGN §5 "Overflow guard"): never send a request that must fail.

It runs last, on the assembled prompt, after the shell has already compacted synchronously.
If the prompt still exceeds the model's limit minus the reserved output, the oldest whole
messages/rounds after the protected head are dropped; if even that cannot make it fit, the
optional blocks of the per-turn stages go (``OPTIONAL_BLOCKS``), and only a prompt too large
without them is refused with an actionable ``ContextLengthExceeded`` instead of a provider 400
(its text: ``overflow_refusal.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from proxy.cascade.commands import kept_positions
from proxy.cascade.observations import is_observation
from proxy.cascade.overflow_refusal import refusal
from proxy.cascade.step import Stage, StepInput
from proxy.cascade.summary import system_prefix_count
from proxy.cascade.text import remove_block
from proxy.cascade.types import (
    TRIMMED,
    ContextLengthExceeded,
    Event,
    Marks,
    Message,
    StageResult,
    TokenCounter,
)

__all__ = [
    "GUARD_MARGIN",
    "OPTIONAL_BLOCKS",
    "OVERFLOW",
    "TRIM_TARGET",
    "block_room",
    "calibrated_count",
    "GuardResult",
    "fit",
    "guard",
    "guard_factor",
    "refuses",
]

GUARD_MARGIN = 1.03
"""The guard counts with the session's real/estimated ratio plus this margin: the estimate is
calibrated on whole prompts, and one step's new text can tokenise denser than the average."""


def guard_factor(ratio: float) -> float:
    """What the guard multiplies the estimate by: the session's real/estimated ratio (at
    least 0.5, as calibration clamps it) plus :data:`GUARD_MARGIN`."""
    return max(ratio, 0.5) * GUARD_MARGIN


TRIM_TARGET = 0.6
"""Once the guard must trim, it trims down to this fraction of the prompt budget."""


@dataclass(frozen=True, slots=True)
class GuardResult:
    messages: tuple[Message, ...]
    events: tuple[Event, ...]
    dropped: int
    gone: tuple[int, ...] = ()  # the input indices dropped, ascending


def _last_user(messages: Sequence[Message], prefixes: Sequence[str] = ()) -> int | None:
    """The current turn's user message: the latest that is not a tool observation (a
    text-action agent's, ``observations``); None when there is none (a text agent's task
    folded into the summary: its latest step, thought and observation, is what stays)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") == "user" and not is_observation(messages, i, prefixes, latest_too=True):
            return i
    return None


_RESULT_ROLES = frozenset({"tool", "function"})
"""Roles of call results: ``tool``, and ``function`` answering a legacy ``function_call``."""


def _units(
    messages: Sequence[Message], start: int, stop: int, prefixes: Sequence[str] = ()
) -> list[tuple[int, int]]:
    """Droppable ``(begin, end)`` units of ``messages[start:stop]``, oldest first.

    A unit is one message, or an assistant message with ``tool_calls`` (or a legacy
    ``function_call``) plus the results that follow it (a round, dropped whole), or with
    the tool observation a text-action agent answers it with (``prefixes``). Results at
    ``start`` whose call sits before it cannot be dropped without orphaning that call, so
    they are never a unit.
    """
    i = start
    while i < stop and messages[i].get("role") in _RESULT_ROLES:
        i += 1
    units: list[tuple[int, int]] = []
    while i < stop:
        begin = i
        i += 1
        while i < stop and messages[i].get("role") in _RESULT_ROLES:
            i += 1
        if i == begin + 1 and i < stop and is_observation(messages, i, prefixes, latest_too=True):
            i += 1
        units.append((begin, i))
    return units


def guard(
    messages: Sequence[Message],
    *,
    count: TokenCounter,
    limit: int,
    reserved_output: int,
    protected_head: int,
    fixed: int = 0,
    trim_current_turn: bool = False,
    target: int | None = None,
    observation_prefixes: Sequence[str] = (),
    assembled: int = 0,
    positions: Sequence[int] = (),
) -> GuardResult:
    """Make the prompt fit ``limit - reserved_output`` or refuse it (``fixed``: the part of
    ``reserved_output`` the request's tools and response schema take, named apart in a
    refusal).

    Drops the oldest whole units (single messages, a tool round with all its results, or a
    legacy ``function_call`` with its ``function`` result) after the first ``protected_head``
    messages — the system messages and the user message carrying the summary — and never the
    last user message or anything after it (the current turn). A user message that is a
    tool observation (``observation_prefixes``) belongs to its turn's rounds: the turn's
    user message is the latest one that is not.
    A round is never split and the kept sequence never starts a unit with a result.
    With ``trim_current_turn`` (an agent loop where one user message starts hundreds of
    rounds), older whole rounds of the current turn go too, after all earlier history; the
    newest round and the last user message always stay.
    Once trimming is needed it goes down to ``target`` tokens when that is reachable (a low
    watermark: the shell persists what was dropped, so a deeper cut now means the prompt
    prefix stays unchanged for many steps instead of moving by one round every step), else
    to the budget.
    Emits one ``context.trimmed`` event. Raises ``ContextLengthExceeded`` when even dropping
    everything droppable is not enough, counting what would be sent with it all gone (beside
    the prompt as given, or ``assembled``: its size before blocks were left out) and naming
    the largest message so a person can act (``positions``: each message's place in the
    client's list, aligned at the end).
    """
    budget = limit - reserved_output
    before = count(messages)
    if before <= budget:
        return GuardResult(tuple(messages), (), 0)
    head_end = min(max(protected_head, 0), len(messages))
    last_user = _last_user(messages, observation_prefixes)
    stop = last_user if last_user is not None and last_user > head_end else head_end
    units = _units(messages, head_end, stop, observation_prefixes)
    if trim_current_turn:
        turn = max(head_end, last_user + 1 if last_user is not None else 0)
        units += _units(messages, max(stop, turn), len(messages), observation_prefixes)[:-1]

    def assemble(k: int) -> tuple[Message, ...]:
        gone = {i for begin, end in units[:k] for i in range(begin, end)}
        return tuple(m for i, m in enumerate(messages) if i not in gone)

    floor = count(assemble(len(units))) if units else before
    if not units or floor > budget:
        raise refusal(
            messages,
            count=count,
            needed=floor,
            limit=limit,
            reserved=reserved_output,
            head=head_end,
            fixed=fixed,
            assembled=max(before, assembled),
            positions=positions,
        )
    goal = target if target is not None and floor <= target < budget else budget
    lo, hi = 1, len(units)  # fewest oldest units to drop; count is monotone in dropped units
    while lo < hi:
        mid = (lo + hi) // 2
        if count(assemble(mid)) <= goal:
            hi = mid
        else:
            lo = mid + 1
    kept = assemble(lo)
    gone = tuple(sorted(i for begin, end in units[:lo] for i in range(begin, end)))
    after = count(kept)
    dropped = len(messages) - len(kept)
    event = Event(
        TRIMMED, {"dropped_messages": dropped, "tokens_before": before, "tokens_after": after}
    )
    return GuardResult(kept, (event,), dropped, gone)


def calibrated_count(count: TokenCounter, ratio: float) -> TokenCounter:
    """``count`` as the guard counts: times :func:`guard_factor` of ``ratio``, rounded up.
    Whatever must fit the window the guard fits to counts this way too (an internal
    round's page, the fast model's summary prompt)."""
    factor = guard_factor(ratio)

    def calibrated(messages: Sequence[Message], /) -> int:
        return math.ceil(count(messages) * factor)

    return calibrated


def block_room(
    step: StepInput, share: float, role: str, *, calibrated: bool = True
) -> tuple[int, Callable[[str], int]]:
    """An optional block's cap, ``share`` of the prompt budget (limit less reserved output),
    and what a text adds as one message of ``role``, its framing left out: counted as the
    guard counts (``calibrated_count``), since the budget is the provider's tokens, which the
    raw estimate undercounts by the session's real/estimated ratio; by the raw estimate when
    not ``calibrated`` (a caller that turns the cap into estimate tokens itself)."""
    budget = step.budget.limit - step.budget.reserved_output
    count = calibrated_count(step.count, step.ratio) if calibrated else step.count
    framing = count([{"role": role, "content": ""}])

    def tokens(text: str) -> int:
        return count([{"role": role, "content": text}]) - framing

    return max(int(budget * share), 0), tokens


OPTIONAL_BLOCKS = ("retrieval", "recitation", "memory")
"""The per-turn stages whose block the guard leaves out, in this order, before it refuses a
prompt that cannot fit with them: each is an aid (the plan restates the summary, retrieval
and memory are recalled text), never what the client sent."""


def _block(step: StepInput, name: str) -> str | None:
    answer = step.answers.get(name)
    block = answer.get("block") if isinstance(answer, Mapping) else answer
    return block if isinstance(block, str) and block else None


def _without(
    messages: tuple[Message, ...], source: tuple[int, ...], block: str
) -> tuple[tuple[Message, ...], tuple[int, ...]] | None:
    """``messages`` with ``block`` taken out of the last message holding it (a message that
    is the block alone, as memory's own system message, goes), and each one's input index."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("content") == block and messages[i].get("role") == "system":
            return messages[:i] + messages[i + 1 :], source[:i] + source[i + 1 :]
        if (stripped := remove_block(messages[i], block)) is not None:
            return (*messages[:i], stripped, *messages[i + 1 :]), source
    return None


def fit(messages: tuple[Message, ...], step: StepInput) -> StageResult:
    """The stage: ``guard`` with the calibrated count, the system messages and the folded
    summary protected, the current turn's older rounds trimmable, and a low watermark of
    ``TRIM_TARGET``. What it drops is marked trimmed: the shell keeps it out for good.

    A prompt that cannot fit even so goes again without the optional blocks
    (``OPTIONAL_BLOCKS``, one more each time) before it is refused; the blocks left out are
    named in the ``context.trimmed`` event and marked, so the turn leaves them out after.
    The refusal is the last attempt's: it counts the prompt without any of them."""
    count = calibrated_count(step.count, step.ratio)
    current, source = messages, tuple(range(len(messages)))
    dropped: tuple[str, ...] = ()
    try:
        return _fit(current, source, step, count)
    except ContextLengthExceeded as first:
        refused = first
    before = count(messages)
    for name in OPTIONAL_BLOCKS:
        block = _block(step, name)
        less = _without(current, source, block) if block is not None else None
        if less is None:
            continue
        (current, source), dropped = less, (*dropped, name)
        try:
            return _fit(current, source, step, count, dropped, before)
        except ContextLengthExceeded as still:
            refused = still
    raise refused from None


def refuses(messages: tuple[Message, ...], step: StepInput) -> bool:
    """Whether the guard refuses ``messages`` (with no optional block in them): what a
    stage that can shorten the current turn checks, so it counts as the guard counts."""
    count = calibrated_count(step.count, step.ratio)
    if count(messages) <= step.budget.limit - step.budget.reserved_output:
        return False
    try:
        _fit(messages, tuple(range(len(messages))), step, count)
    except ContextLengthExceeded:
        return True
    return False


def _fit(
    messages: tuple[Message, ...],
    source: tuple[int, ...],
    step: StepInput,
    count: TokenCounter,
    dropped: tuple[str, ...] = (),
    before: int = 0,
) -> StageResult:
    """``guard`` on ``messages``, whose input index each ``source`` names, with the marks in
    input indices; ``dropped``: the blocks already left out, named in the event, which
    counts from the prompt as assembled (``before`` tokens)."""
    budget = step.budget
    guarded = guard(
        messages,
        count=count,
        limit=budget.limit,
        reserved_output=budget.reserved_output,
        fixed=budget.fixed,
        # the prompt's own leading system messages: the memory stage may have put one of its
        # own on top, or left out a resent one that was its block alone
        protected_head=system_prefix_count(messages) + (1 if step.summary else 0),
        trim_current_turn=True,
        target=int((budget.limit - budget.reserved_output) * TRIM_TARGET),
        observation_prefixes=step.ctx.observations.user_prefixes,
        assembled=before,
        # past the head the prompt ends as the window does, less its /compact exchanges
        positions=kept_positions(step.window, step.positions)
        if len(step.positions) == len(step.window)
        else (),
    )
    if not dropped and not guarded.gone:
        return StageResult(guarded.messages, guarded.events)
    events = guarded.events
    if dropped:
        data = {
            "dropped_messages": guarded.dropped,
            "tokens_before": before,
            "tokens_after": count(guarded.messages),
            "dropped_blocks": list(dropped),
        }
        events = (Event(TRIMMED, data),)
    gone = set(guarded.gone)
    kept = tuple(s for i, s in enumerate(source) if i not in gone)
    trimmed = tuple(source[i] for i in guarded.gone)
    marks = Marks(trimmed=trimmed, source=kept, dropped_blocks=dropped)
    return StageResult(guarded.messages, events, marks)


OVERFLOW = Stage("overflow", fit)
