"""Tool observations sent as user messages, managed like tool results.

Text-action agents (smolagents' agents, SWE-agent style loops) send a tool's output back as a
user message ("Observation: …") after the assistant's action. Such a message is an
observation when it follows an assistant message, starts with one of
``context.observations.userPrefixes``, and is not the latest message (the latest one is
what the model answers now, so it goes as sent), unless the overflow guard would refuse the
prompt over it (it does not fit beside what the guard never drops: the system messages, the
task, the action it answers): an agent loop cannot shorten what its tool gave, so it is cut
as the same output sent as a tool result is at ingestion.

Its handle for ``read_tool_output`` is ``obs_`` plus the first 24 hex digits of the SHA-256
of its text as stored at ingestion (after redaction): stable across requests without
storing anything new, the same for the same text (which reads back the same bytes either
way). The shell stores it as the row's ``tool_call_id``, so an evicted or rewritten
observation reads back from its row's body like an evicted tool result. Once rewritten, the
message names its handle in its marker, and ``observation_id`` reads it from there.

The observations stage (first in ``STAGES``) runs the ingest step (lossless compaction, else
truncation) on each observation that is no longer the latest message and is not yet
rewritten; it marks the rewrite as ``evicted``, so the shell stores it beside the row (the
original stays the row's body) and every later prompt sends the same text. Pointers to
earlier results are not used here: those may already be rewritten, and line numbers in a
rewritten text are not lines of the original.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from proxy.cascade.step import Stage, StepInput
from proxy.cascade.text import content_text, with_text
from proxy.cascade.truncation import truncate_tool_result
from proxy.cascade.types import Event, Marks, Message, StageResult
from proxy.config_context import RedactionConfig

__all__ = [
    "OBSERVATIONS",
    "is_observation",
    "observation_id",
    "observation_ids",
    "manage_observations",
]

_NO_REDACTION = RedactionConfig(enabled=False)
_HANDLE_ID = re.compile(r'read_tool_output\(\{"id": "(obs_[0-9a-f]{24})"')
_REWRITTEN = ("[compacted losslessly from ", "[... truncated ", "[context-cleared]")


def observation_id(msg: Message) -> str:
    """The handle of an observation (module docstring)."""
    text = content_text(msg.get("content"))
    named = _HANDLE_ID.search(text)
    if named is not None:
        return named.group(1)
    return "obs_" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def is_observation(
    messages: Sequence[Message], i: int, prefixes: Sequence[str], *, latest_too: bool = False
) -> bool:
    """Whether ``messages[i]`` is an observation; ``latest_too`` drops the not-latest rule
    (the shell names the row's handle when it stores the message, latest or not)."""
    if not prefixes or i <= 0 or i >= len(messages):
        return False
    if i == len(messages) - 1 and not latest_too:
        return False
    msg = messages[i]
    if msg.get("role") != "user" or messages[i - 1].get("role") != "assistant":
        return False
    text = content_text(msg.get("content")).lstrip()
    return any(text.startswith(p) for p in prefixes if p)


def observation_ids(messages: Sequence[Message], prefixes: Sequence[str]) -> dict[int, str]:
    """Index -> handle of every observation in ``messages`` (the latest message excluded)."""
    return {
        i: observation_id(messages[i])
        for i in range(len(messages))
        if is_observation(messages, i, prefixes)
    }


def _rewritten(text: str) -> bool:
    first = text[:400]
    return any(marker in first for marker in _REWRITTEN)


def _over_budget(messages: tuple[Message, ...], step: StepInput) -> dict[int, str]:
    """The latest message's handle, when it is an observation the overflow guard would
    refuse the prompt over: with the summary folded in, and all it can drop dropped, the
    prompt is still more than the budget (``overflow.refuses``, which counts as it does)."""
    from proxy.cascade.overflow import refuses  # the guard reads observations too
    from proxy.cascade.summary import fold_summary

    last = len(messages) - 1
    prefixes = step.ctx.observations.user_prefixes
    if not is_observation(messages, last, prefixes, latest_too=True):
        return {}
    prompt = fold_summary(messages, summary=step.summary, system_count=step.system_count)
    if not refuses(prompt, step):
        return {}
    return {last: observation_id(messages[last])}


def manage_observations(messages: tuple[Message, ...], step: StepInput) -> StageResult:
    """Rewrite each observation not yet rewritten as a tool result would be at ingestion."""
    prefixes = step.ctx.observations.user_prefixes
    out = list(messages)
    changed: list[int] = []
    events: list[Event] = []
    found = observation_ids(messages, prefixes) | _over_budget(messages, step)
    for i, oid in found.items():
        msg = messages[i]
        text = content_text(msg.get("content"))
        if _rewritten(text):
            continue
        cfg = step.ctx.tool_output
        if oid in step.unspillable:
            cfg = cfg.model_copy(update={"persist_raw": False})
        got = truncate_tool_result(
            {"role": "tool", "tool_call_id": oid, "content": text}, cfg=cfg, redaction=_NO_REDACTION
        )
        if got.message.get("content") == text:
            continue
        new = str(got.message["content"])
        if not new.lstrip().startswith(tuple(prefixes)):
            head = next(p for p in prefixes if p and text.lstrip().startswith(p))
            new = f"{head}\n{new}"
        out[i] = {**msg, "content": with_text(msg.get("content"), new)}
        changed.append(i)
        events.extend(got.events)
    if not changed:
        return StageResult(messages)
    return StageResult(tuple(out), tuple(events), Marks(evicted=tuple(changed)))


OBSERVATIONS = Stage(
    "observations", manage_observations, enabled=lambda ctx: bool(ctx.observations.user_prefixes)
)
