"""The two phases: a per-turn stage computes its value at a turn's first step only, and the
later steps of the turn reuse the kept value byte for byte; per-step stages always run."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

from proxy.cascade.phases import as_kept, turn_start
from proxy.cascade.pipeline import STAGES, assemble, plan_step
from proxy.cascade.step import Stage, StageFn, StepInput
from proxy.cascade.types import Budget, Message, StageResult
from proxy.config_context import ContextConfig
from tests.unit.cascade.summary_builders import (
    assistant,
    assistant_calls,
    count,
    system,
    tool,
    user,
)


@dataclass(frozen=True, slots=True)
class TagNeed:
    query: str


def _plan_tag(step: StepInput) -> TagNeed:
    return TagNeed(str(step.window[-1].get("content")))


def _adder(name: str) -> StageFn:
    """A stage that tags the last message with its answer."""

    def add(messages: tuple[Message, ...], step: StepInput) -> StageResult:
        tag = step.answers.get(name)
        if not tag:
            return StageResult(messages)
        last = messages[-1]
        return StageResult((*messages[:-1], {**last, "content": f"{last['content']} <t>{tag}</t>"}))

    return add


TAG = Stage("tag", _adder("tag"), plan=_plan_tag, per_turn=True)
"""A per-turn stage with I/O, as the retrieval stage is: the one flag makes it per turn."""

CALLS: list[int] = []


def _count_calls(step: StepInput) -> str:
    CALLS.append(1)
    return f"computed from {step.summary}"


PURE = Stage("pure", _adder("pure"), per_turn=True, answer=_count_calls)
STAGES_UNDER_TEST = (*(s for s in STAGES if s.name != "memory"), TAG)


def _step(*window: Message, kept: dict[str, Any] | None = None) -> StepInput:
    return StepInput(
        window=tuple(window),
        system_count=1,
        summary="S1",
        count=count,
        budget=Budget(limit=100_000, reserved_output=0, occupancy=10),
        ctx=ContextConfig(),
        kept=kept or {},
    )


def test_a_turn_begins_at_the_last_user_message_that_is_no_observation() -> None:
    loop = [
        system("s"),
        user("fix it"),
        assistant_calls(("c1", "ls", {})),
        tool("c1", "a.py"),
        assistant("Action: cat a.py"),
        user("Observation: print(1)"),
    ]
    assert turn_start(loop, ("Observation:",)) == 1
    assert turn_start(loop, ()) == 5  # without the prefix, that user message is a turn
    assert turn_start([*loop, assistant("done"), user("thanks")], ("Observation:",)) == 7
    assert turn_start([system("s")], ("Observation:",)) is None


def test_a_per_turn_stage_is_planned_and_kept_at_the_turns_first_step_only() -> None:
    first = _step(system("s"), user("q"))
    assert plan_step(first, STAGES_UNDER_TEST) == {"tag": TagNeed("q")}
    out = assemble(first, STAGES_UNDER_TEST, answers={"tag": "found"})
    assert out.messages[-1]["content"].endswith("\nq <t>found</t>")
    assert out.kept == {"tag": "found"}

    later = _step(
        system("s"), user("q"), assistant_calls(("c1", "ls", {})), tool("c1", "x"), kept=out.kept
    )
    assert plan_step(later, STAGES_UNDER_TEST) == {}  # nothing is fetched again
    again = assemble(later, STAGES_UNDER_TEST)
    assert again.messages[-1]["content"] == "x <t>found</t>" and again.kept is None


def test_a_pure_per_turn_value_is_computed_once_per_turn() -> None:
    CALLS.clear()
    first = assemble(_step(system("s"), user("q")), (PURE,))
    assert first.kept == {"pure": "computed from S1"} and len(CALLS) == 1
    later = replace(_step(system("s"), user("q"), assistant("a"), user("r")), summary="S2")
    assert assemble(replace(later, kept=first.kept), (PURE,)).messages[-1]["content"] == (
        "r <t>computed from S1</t>"
    )
    assert len(CALLS) == 1


def test_a_value_made_of_something_is_made_again_mid_turn_when_that_changed() -> None:
    made = replace(PURE, made_of=lambda step: str(step.summary))
    CALLS.clear()
    first = assemble(_step(system("s"), user("q")), (made,))
    assert first.kept == {"pure": "computed from S1", "pure:of": "S1"} and len(CALLS) == 1
    same = assemble(_step(system("s"), user("q"), assistant("a"), kept=first.kept), (made,))
    assert same.kept is None and len(CALLS) == 1
    step = replace(_step(system("s"), user("q"), assistant("a"), kept=first.kept), summary="S2")
    renewed = assemble(step, (made,))
    assert renewed.kept == {"pure": "computed from S2", "pure:of": "S2"} and len(CALLS) == 2
    assert renewed.messages[-1]["content"] == "a <t>computed from S2</t>"


def test_a_stage_switched_on_mid_turn_runs_and_joins_what_the_turn_keeps() -> None:
    out = assemble(_step(system("s"), user("q"), kept={"tag": "t"}), (TAG, PURE))
    assert out.kept == {"tag": "t", "pure": "computed from S1"}


def test_no_per_turn_stage_enabled_keeps_nothing() -> None:
    assert assemble(_step(system("s"), user("q"))).kept is None


def test_a_kept_value_is_what_its_json_reads_back() -> None:
    assert as_kept(("a", 1, {"b": ("c",)})) == ["a", 1, {"b": ["c"]}]
    assert as_kept("nul \x00 and é") == "nul \x00 and é"
    with pytest.raises(TypeError):
        as_kept(object())
