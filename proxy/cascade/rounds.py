"""Tool rounds: an assistant message with tool calls plus the tool messages answering it.

Every stage that removes or rewrites messages works in whole rounds so that an assistant's
``tool_calls`` is never separated from its results (providers reject such a prompt). Parallel
calls made in one step are one round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.cascade.text import content_text
from proxy.cascade.types import Message

__all__ = [
    "Round",
    "call_functions",
    "call_ids",
    "call_name",
    "group_rounds",
    "protected_from",
    "tool_names",
]


@dataclass(frozen=True, slots=True)
class Round:
    """Messages ``[start, end)`` of one tool round; ``tool_call_ids`` in call order."""

    start: int
    end: int
    tool_call_ids: tuple[str, ...]


def call_ids(msg: Message) -> tuple[str, ...]:
    """The non-empty tool-call ids an assistant message declares, in order."""
    if msg.get("role") != "assistant":
        return ()
    calls = msg.get("tool_calls")
    if not isinstance(calls, Sequence) or isinstance(calls, str):
        return ()
    ids: list[str] = []
    for call in calls:
        if isinstance(call, Mapping):
            cid = call.get("id")
            if isinstance(cid, str) and cid:
                ids.append(cid)
    return tuple(ids)


def call_functions(msg: Message) -> list[Mapping[str, Any]]:
    """The ``function`` objects (``name``, ``arguments``) a message calls, in order: each
    tool call's, then a legacy ``function_call`` (the deprecated ``functions`` API's one
    call), so what reads a call's arguments reads both forms alike."""
    out: list[Mapping[str, Any]] = []
    calls = msg.get("tool_calls")
    if isinstance(calls, Sequence) and not isinstance(calls, str):
        for call in calls:
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping):
                out.append(fn)
    legacy = msg.get("function_call")
    if isinstance(legacy, Mapping):
        out.append(legacy)
    return out


def _has_calls(msg: Message) -> bool:
    calls = msg.get("tool_calls")
    return msg.get("role") == "assistant" and bool(calls) and not isinstance(calls, str)


def _observed(messages: Sequence[Message], i: int, prefixes: Sequence[str]) -> bool:
    """An assistant message without tool calls answered by an observation (the user
    message after it starts with one of ``prefixes``; ``observations.py``)."""
    if not prefixes or i + 1 >= len(messages) or messages[i].get("role") != "assistant":
        return False
    nxt = messages[i + 1]
    text = content_text(nxt.get("content")).lstrip()
    return nxt.get("role") == "user" and text.startswith(tuple(p for p in prefixes if p))


def group_rounds(messages: Sequence[Message], prefixes: Sequence[str] = ()) -> tuple[Round, ...]:
    """Group messages into disjoint, ordered tool rounds.

    A round starts at an assistant message with tool calls and extends over every later tool
    message whose ``tool_call_id`` that assistant declared, contiguous or not (malformed
    histories put results late). Rounds that overlap because of such a late result are merged
    into one, so rounds are always disjoint ranges and removing or keeping a round whole never
    separates a call from its result. Tool messages answering no known call belong to no round.
    With ``prefixes``, an assistant message without calls and the observation after it (a
    user message starting with one of them) are a round too. A legacy ``function_call`` and
    its ``function`` result are none: eviction, which counts these rounds, never clears such
    a result (it has no id for a handle), and the overflow guard and the summary keep the
    pair together on their own.
    """
    starts: list[int] = []
    ends: list[int] = []
    ids: list[tuple[str, ...]] = []
    owner: dict[str, int] = {}
    for i, msg in enumerate(messages):
        if _has_calls(msg):
            starts.append(i)
            ends.append(i + 1)
            declared = call_ids(msg)
            ids.append(declared)
            for cid in declared:
                owner[cid] = len(starts) - 1
        elif _observed(messages, i, prefixes):
            starts.append(i)
            ends.append(i + 2)
            ids.append(())
        elif msg.get("role") == "tool":
            r = owner.get(str(msg.get("tool_call_id") or ""))
            if r is not None:
                ends[r] = max(ends[r], i + 1)
    merged: list[Round] = []
    for start, end, declared in zip(starts, ends, ids, strict=True):
        if merged and start < merged[-1].end:
            last = merged[-1]
            merged[-1] = Round(last.start, max(last.end, end), last.tool_call_ids + declared)
        else:
            merged.append(Round(start, end, declared))
    return tuple(merged)


def protected_from(
    messages: Sequence[Message], keep_recent_rounds: int, prefixes: Sequence[str] = ()
) -> int:
    """Index from which every message is protected: the start of the k-th last round.

    ``k == 0`` protects nothing (returns ``len(messages)``); fewer than ``k`` rounds protects
    everything (returns 0). Messages after the last round (the newest user turn, say) are
    always inside the protected tail.
    """
    if keep_recent_rounds <= 0:
        return len(messages)
    rounds = group_rounds(messages, prefixes)
    if len(rounds) < keep_recent_rounds:
        return 0
    return rounds[-keep_recent_rounds].start


def tool_names(messages: Sequence[Message]) -> dict[str, str]:
    """Map tool_call_id -> function name, from assistant tool calls (tool ``name`` as fallback)."""
    names: dict[str, str] = {}
    for msg in messages:
        if msg.get("role") == "tool":
            cid, name = msg.get("tool_call_id"), msg.get("name")
            if isinstance(cid, str) and cid and isinstance(name, str) and name:
                names.setdefault(cid, name)
            continue
        calls = msg.get("tool_calls")
        if msg.get("role") != "assistant" or not isinstance(calls, Sequence):
            continue
        for call in calls:
            if not isinstance(call, Mapping):
                continue
            fn = call.get("function")
            cid = call.get("id")
            if isinstance(cid, str) and cid and isinstance(fn, Mapping):
                fname = fn.get("name")
                if isinstance(fname, str) and fname:
                    names[cid] = fname
    return names


def call_name(messages: Sequence[Message], index: int) -> str | None:
    """The function name of the call that ``messages[index]``, a tool result, answers: the
    call with its id in the assistant message its round starts with; None when there is
    none. A client that reuses ids (``call_0`` every turn) sends several results under one
    id, each made by its own round's call, which ``tool_names`` (one name per id) cannot
    tell apart."""
    cid = messages[index].get("tool_call_id")
    i = index - 1
    while i >= 0 and messages[i].get("role") == "tool":
        i -= 1
    if i < 0 or messages[i].get("role") != "assistant":
        return None
    calls = messages[i].get("tool_calls")
    if not isinstance(calls, Sequence):
        return None
    for call in calls:
        fn = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(fn, Mapping) and call.get("id") == cid:
            name = fn.get("name")
            return name if isinstance(name, str) and name else None
    return None
