"""The two phases of a step: per-turn values are computed once a turn, per-step stages always.

A turn begins with a user message that is not an observation (``turn_start``): the agent's
tool loop that follows (assistant calls, tool results, observations sent as user messages)
is that turn's later steps. The shell names a turn by the chain hash of its first message,
which covers the whole history before it, so an edited or regenerated history is a new turn
and a retried request is the same one.

``turn_answers`` gives each enabled per-turn stage (``Stage.per_turn``) its value for this
step: the one kept for the turn (``StepInput.kept``), or, when the turn has none for it yet
(its first step, or the stage was switched on mid-turn), the one just fetched or computed,
which is then kept. A stage whose value follows what it is made from (``Stage.made_of``) is
given a new one mid-turn when that changed, and the turn keeps the digest beside the value.
A value goes through JSON once on its way in, so the first step places
exactly what the later steps read back from the store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.cascade.observations import is_observation
from proxy.cascade.step import Stage, StepInput
from proxy.cascade.types import Message

__all__ = ["turn_start", "turn_answers", "as_kept", "kept_text", "made_of_key"]


def turn_start(messages: Sequence[Message], prefixes: Sequence[str]) -> int | None:
    """Index of the message that began the current turn: the last user message that is not
    an observation; None when the history has no user message."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user" and not is_observation(
            messages, i, prefixes, latest_too=True
        ):
            return i
    return None


def as_kept(value: Any) -> Any:
    """``value`` as it reads back from its stored JSON text."""
    return json.loads(json.dumps(value, ensure_ascii=True, allow_nan=False))


def kept_text(kept: Mapping[str, Any]) -> str:
    """A turn's values as the JSON text the session row keeps (ASCII: no NUL reaches the
    row); a text found in a value is found in it as ``kept_text`` of that text, less the
    quotes (``store.memory`` finds the turns that show a fact so)."""
    return json.dumps(kept, ensure_ascii=True, separators=(",", ":"))


def turn_answers(
    stages: Sequence[Stage], step: StepInput, answers: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Every answer the stages read on this step, and what the turn keeps from now on
    (None when this step computed no per-turn value, so nothing needs storing)."""
    out = dict(answers)
    new: dict[str, Any] = {}
    for stage in stages:
        if not stage.per_turn:
            continue
        made_of = None if stage.made_of is None else stage.made_of(step)
        if made_of is not None and step.kept.get(made_of_key(stage)) != made_of:
            new[made_of_key(stage)] = made_of
            if made_of_key(stage) not in step.kept and stage.name in step.kept:
                # kept by a version that noted no digest: noted now, renewed from the next
                out[stage.name] = step.kept[stage.name]
                continue
        elif stage.name in step.kept:
            out[stage.name] = step.kept[stage.name]
            continue
        value = stage.answer(step) if stage.answer is not None else answers.get(stage.name)
        out[stage.name] = new[stage.name] = as_kept(value)
    return out, ({**step.kept, **new} if new else None)


def made_of_key(stage: Stage) -> str:
    """Where the turn keeps the digest of what ``stage``'s value was made from
    (``Stage.made_of``)."""
    return f"{stage.name}:of"
