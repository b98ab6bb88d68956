"""How to add a stage, worked through on a toy one (docs/architecture.md walks the same path).

The toy ``note`` stage appends a ``<note>`` block, fetched from outside, after the last
message. In the tree it would be:

1. ``proxy/cascade/note.py``: the need, the pure plan, the pure run, and ``NOTE = Stage(...)``
   (here: the top of this file);
2. ``proxy/cascade/pipeline.py``: one entry in ``STAGES`` (here: the ``stages`` tuple);
3. ``proxy/services/needs.py``: one entry in ``FULFILLERS`` (here: ``fulfillers``).

Three files, none of them the chat service, the store or the Forwarder (a config switch for
``enabled`` would be a fourth: ``proxy/config_context.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.cascade.pipeline import STAGES, StepInput, assemble, plan_step
from proxy.cascade.step import Stage
from proxy.cascade.text import content_text
from proxy.cascade.types import Budget, Event, Marks, Message, StageResult
from proxy.config_context import ContextConfig
from proxy.services.needs import FULFILLERS, fulfil
from proxy.session_id import SessionKey
from tests.unit.cascade.summary_builders import count, system, user

# -- 1. the stage module -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NoteNeed:
    """What the stage needs from outside: a note about ``topic``."""

    topic: str


def plan_note(step: StepInput) -> NoteNeed | None:
    """Pure: ask for a note about the last user message, if there is one."""
    users = [m for m in step.window if m.get("role") == "user"]
    return NoteNeed(content_text(users[-1].get("content"))) if users else None


def add_note(messages: tuple[Message, ...], step: StepInput) -> StageResult:
    """Pure: append the fetched note; it is a block of the prompt, not a window row."""
    note = step.answers.get("note")
    if not note:
        return StageResult(messages)
    block = {"role": "user", "content": f"<note>{note}</note>"}
    return StageResult(
        (*messages, block),
        (Event("context.note", {"chars": len(note)}),),
        Marks(source=(*range(len(messages)), None)),
    )


NOTE = Stage("note", add_note, plan=plan_note)

# -- 2. its place in the stage tuple (before the overflow guard, which must see it) ---------

# (without the memory stage, whose fulfiller needs a database)
stages = (*(s for s in STAGES[:-1] if s.name != "memory"), NOTE, STAGES[-1])

# -- 3. its fulfiller: the I/O, in the shell ----------------------------------------------


async def fetch_note(need: NoteNeed, conn: Any, key: SessionKey) -> str:
    return f"{key.session_id} asked about {need.topic}"


fulfillers = {**FULFILLERS, NoteNeed: fetch_note}

# -- the shell's part, as services/chat.py runs it -----------------------------------------


def _step() -> StepInput:
    window = (system("s"), user("the parser"))
    return StepInput(
        window=window,
        system_count=1,
        summary=None,
        count=count,
        budget=Budget(limit=10_000, reserved_output=0, occupancy=10),
        ctx=ContextConfig(),
    )


async def test_the_toy_stage_plans_is_fulfilled_and_injects_its_block() -> None:
    step = _step()
    needs = plan_step(step, stages)
    assert needs == {"note": NoteNeed("the parser")}
    answers = await fulfil(needs, conn=None, key=SessionKey("t", "s1"), fulfillers=fulfillers)
    out = assemble(step, stages, answers=answers)
    assert out.messages[-1]["content"] == "<note>s1 asked about the parser</note>"
    assert out.messages[:-1] == step.window
    assert out.injected == (2,) and not out.evicted and not out.trimmed
    assert [e.name for e in out.events] == ["context.note"]


async def test_without_the_stage_in_the_tuple_nothing_changes() -> None:
    step = _step()
    assert "note" not in plan_step(step)
    assert assemble(step).messages == step.window


async def test_a_need_without_a_fulfiller_is_an_error() -> None:
    try:
        await fulfil({"note": NoteNeed("x")}, conn=None, key=SessionKey("t", "s"))
    except TypeError as exc:
        assert "note" in str(exc)
    else:
        raise AssertionError("expected TypeError")
