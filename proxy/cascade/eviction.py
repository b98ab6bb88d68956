"""Stage 1: lossless eviction of old tool results.

When the window is filling up, tool results outside the protected recent rounds are replaced
by a short ``[context-cleared]`` placeholder that tells the model how to get the output back
(``read_tool_output``) or, when no copy is kept, that it must re-run the tool. Only the
result's ``content`` changes: every message keeps its place, role and ``tool_call_id``, so no
call is ever separated from its result.

Why batch: every change to an earlier message turns the provider's cached prefix after it
into a cache miss. So eviction fires rarely and big: only when a pass can reclaim at least
``clearAtLeast`` tokens and at least ``MISS_RATIO`` times what it re-bills (everything from
the first cleared result on), and then it clears *everything* eligible at once rather than the
minimum needed.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.cascade.observations import observation_ids
from proxy.cascade.pins import id_args_name, pin
from proxy.cascade.rounds import call_name, protected_from, tool_names
from proxy.cascade.step import Stage, StepInput
from proxy.cascade.text import content_text, has_text
from proxy.cascade.types import (
    EVICTED,
    READ_TOOL_OUTPUT,
    Budget,
    Event,
    Marks,
    Message,
    StageResult,
    TokenCounter,
)
from proxy.config_context import EvictionConfig

__all__ = [
    "EVICTION",
    "MISS_RATIO",
    "PLACEHOLDER_PREFIX",
    "drop_placeholder_handle",
    "evict",
    "is_placeholder",
    "placeholder_text",
]

PLACEHOLDER_PREFIX = "[context-cleared]"
_WORD = re.compile(r"[A-Za-z0-9_]{1,32}")
MISS_RATIO = 0.5
"""A pass must reclaim at least this many times the tokens it turns into cache misses.

A cleared token saves its cached price, 0.1, on every later step it stays out; a re-billed
token costs 0.9 extra once. At 0.5 a pass pays off when the cleared tokens stay out about 18
steps. On the replay bench 0.5 and 1.0 cost the same within noise (docs/perf.md), and 0.5
still clears one large old result in front of a protected round of similar size."""


@dataclass(frozen=True, slots=True)
class _Candidate:
    index: int
    tool_call_id: str
    handle: str
    replacement: Message
    reclaimed: int


def is_placeholder(msg: Message) -> bool:
    """True when a tool message's content is already an eviction placeholder."""
    return content_text(msg.get("content")).startswith(PLACEHOLDER_PREFIX)


def _recovery(tool_call_id: str, *, handle: bool) -> str:
    if handle:
        return f". Recover it with {READ_TOOL_OUTPUT}({json.dumps({'id': tool_call_id})})"
    return "; re-run the tool if you need it."


def _kind(part: Any) -> str:
    """A part's ``type`` when it is a plain word (it is the client's text), else ``part``."""
    kind = part.get("type") if isinstance(part, Mapping) else None
    return kind if isinstance(kind, str) and _WORD.fullmatch(kind) else "part"


def _media_note(content: Any) -> str:
    """``, and N <type> parts that only re-running the tool brings back`` for the parts of a
    result sent as a list that hold no text (images, audio), else ``""``: the placeholder
    drops them with the text, the stored row keeps them, and ``read_tool_output`` pages
    only text, so the model is told what it cannot read back."""
    if not isinstance(content, list):
        return ""
    kinds = Counter(_kind(p) for p in content if not has_text(p))
    if not kinds:
        return ""
    named = " and ".join(f"{n} {kind} part{'s' if n > 1 else ''}" for kind, n in kinds.items())
    return f", and {named} that only re-running the tool brings back"


def placeholder_text(
    tool_name: str, tool_call_id: str, chars: int, *, handle: bool, media: str = ""
) -> str:
    """The placeholder for an evicted result; names ``read_tool_output`` only with a handle.
    ``media`` (``_media_note``) names the parts without text the result had."""
    head = (
        f"{PLACEHOLDER_PREFIX} Result of {tool_name} ({chars} chars{media})"
        " was cleared to save context"
    )
    return head + _recovery(tool_call_id, handle=handle)


_RECOVER = f". Recover it with {READ_TOOL_OUTPUT}("


def drop_placeholder_handle(text: str, own: str) -> str:
    """A placeholder naming a handle of ``own`` (bare or pinned: ``pins.names``) worded as
    one without a handle, for a prompt that goes without the tool (``handles.py``); any
    other text unchanged."""
    if not (text.startswith(PLACEHOLDER_PREFIX) and text.endswith(")")):
        return text
    at = text.rfind(_RECOVER)
    if at < 0:
        return text
    if not id_args_name(text[at + len(_RECOVER) : -1], own):
        return text
    return text[:at] + _recovery(own, handle=False)


def _candidate(
    index: int,
    msg: Message,
    *,
    name: str,
    tokens: int,
    count: TokenCounter,
    persist_raw: bool,
    unspillable: frozenset[str],
    cid: str,
    named: str,
) -> _Candidate | None:
    content = msg.get("content")
    text = content_text(content)
    handle = persist_raw and bool(cid) and cid not in unspillable
    media = _media_note(content)
    replacement = {
        **msg,
        "content": placeholder_text(name, named, len(text), handle=handle, media=media),
    }
    reclaimed = tokens - count([replacement])
    if reclaimed <= 0:
        return None
    return _Candidate(index, cid, named, replacement, reclaimed)


def evict(
    messages: Sequence[Message],
    *,
    count: TokenCounter,
    budget: Budget,
    cfg: EvictionConfig,
    persist_raw: bool,
    unspillable: frozenset[str] = frozenset(),
    prefixes: Sequence[str] = (),
    positions: Sequence[int] = (),
) -> StageResult:
    """Replace old, large tool results with placeholders, all in one pass, or change nothing.

    Fires when ``cfg.enabled`` and ``budget.occupancy >= cfg.at_fraction * budget.limit``.
    Eligible: tool messages (and observations in user messages, ``observations.py``, by
    their handle; ``prefixes``) before the last ``cfg.keep_recent_rounds`` rounds
    (``rounds.group_rounds``: a legacy ``function_call`` with its ``function`` result, which
    has no id for a handle, is neither a round nor eligible), not already a
    placeholder, whose tool is neither excluded nor ``read_tool_output``, of at least
    ``cfg.min_result_tokens`` tokens (``count([msg])``), and that a placeholder would shrink.
    If their reclaimable tokens sum to ``>= cfg.clear_at_least`` and to ``>= MISS_RATIO`` times
    the tokens from the first replaced result to the end (the suffix the pass turns into cache
    misses; a big protected round right after a lone old result is not worth re-billing), they
    are all replaced. The ``context.evicted`` event lists the cleared results in order, in
    ``tool_call_ids`` by id and in ``handles`` by the handle each placeholder names: an id a
    client reuses (``call_0`` every turn) is in ``tool_call_ids`` once per result, while a
    result's pinned handle (``call_0@12``) names it alone.

    A result sent as a list of parts is cleared whole, its images too (freeing the window
    is the point); its stored row keeps every part, and the placeholder names the parts
    without text, which ``read_tool_output`` (text only) does not page back.

    A placeholder with a handle needs no copy of the result: the shell keeps the result's
    text in its stored row beside the placeholder, and ``read_tool_output`` pages it from
    there, so eviction asks for no spill. ``unspillable`` holds ids that must never get a
    handle (their output contained secrets). ``positions`` gives each message's position in
    the session's history: a tool result's placeholder names its ``pins.pin`` handle, which
    reads back that result even once its id comes back (``pins.py``); an observation's
    names its own handle (a hash of its text). Without positions (of another length than
    ``messages``) a placeholder names the bare id. Invariants: message order, count, roles and ids
    never change; a placeholder is never evicted again, so ``evict`` is idempotent.
    """
    unchanged = StageResult(tuple(messages))
    if not cfg.enabled or budget.occupancy < cfg.at_fraction * budget.limit:
        return unchanged
    protected = protected_from(messages, cfg.keep_recent_rounds, prefixes)
    observed = observation_ids(messages, prefixes)
    placed = len(positions) == len(messages)
    names = tool_names(messages)
    excluded = frozenset(cfg.exclude_tools) | {READ_TOOL_OUTPUT}
    chosen: list[_Candidate] = []
    for i in range(protected):
        msg = messages[i]
        if (msg.get("role") != "tool" and i not in observed) or is_placeholder(msg):
            continue
        cid = observed.get(i) or str(msg.get("tool_call_id") or "")
        name = call_name(messages, i) or names.get(cid) or str(msg.get("name") or "tool")
        if name in excluded:
            continue
        tokens = count([msg])
        if tokens < cfg.min_result_tokens:
            continue
        cand = _candidate(
            i,
            msg,
            name=name,
            tokens=tokens,
            count=count,
            persist_raw=persist_raw,
            unspillable=unspillable,
            cid=cid,
            named=pin(cid, positions[i]) if placed and cid and i not in observed else cid,
        )
        if cand is not None:
            chosen.append(cand)
    reclaimed = sum(c.reclaimed for c in chosen)
    if not chosen or reclaimed < cfg.clear_at_least:
        return unchanged
    out = list(messages)
    for c in chosen:
        out[c.index] = c.replacement
    if reclaimed < MISS_RATIO * count(out[chosen[0].index :]):
        return unchanged
    event = Event(
        EVICTED,
        {
            "count": len(chosen),
            "tokens_reclaimed": reclaimed,
            "tool_call_ids": [c.tool_call_id for c in chosen],
            "handles": [c.handle for c in chosen],
        },
    )
    return StageResult(tuple(out), (event,), Marks(evicted=tuple(c.index for c in chosen)))


def evict_stage(messages: tuple[Message, ...], step: StepInput) -> StageResult:
    """The stage: ``evict`` with the step's budget and config."""
    return evict(
        messages,
        count=step.count,
        budget=step.budget,
        cfg=step.ctx.eviction,
        persist_raw=step.ctx.tool_output.persist_raw,
        unspillable=step.unspillable,
        prefixes=step.ctx.observations.user_prefixes,
        positions=step.positions,
    )


EVICTION = Stage("eviction", evict_stage, enabled=lambda ctx: ctx.eviction.enabled)
