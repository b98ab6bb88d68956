"""A small model's ``<memory>`` block is cut at a share of its budget turned into estimate
tokens with the guard's factor rounded to a step (``FACTOR_STEP``); the session's ratio
moves with every reply, and one that moved about a step's edge moved the cap at every turn,
the block at the prompt's head with it (a miss of the provider's whole prompt cache). The
step is now held from the session's last turn until the ratio is clearly past it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from proxy.cascade.memory_block import FACTOR_STEP, factor_step, render_memory
from proxy.cascade.overflow import GUARD_MARGIN
from proxy.cascade.pipeline import StepInput, assemble, plan_step
from proxy.cascade.types import Budget
from proxy.config_context import ContextConfig
from tests.unit.cascade.summary_builders import count, system, user

FACTS = [f"fact number {i:03d} about the build " + "x" * 60 for i in range(40)]
EDGE = FACTOR_STEP / GUARD_MARGIN  # the ratio whose guard factor is one step exactly


def _turn(ratio: float, previous: Mapping[str, Any], n: int) -> StepInput:
    return StepInput(
        window=(system("S"), user(f"turn {n}")),
        system_count=1,
        summary=None,
        count=count,
        budget=Budget(limit=1100, reserved_output=256, occupancy=0),
        ctx=ContextConfig.model_validate({"memoryPromotion": {"mode": "auto"}}),
        ratio=ratio,
        previous=previous,
    )


def _blocks(ratios: Sequence[float]) -> list[str]:
    """The block each turn sends, one request a turn, each turn starting from what the last
    one kept (as the session row keeps it)."""
    previous: Mapping[str, Any] = {}
    blocks = []
    for n, ratio in enumerate(ratios):
        step = _turn(ratio, previous, n)
        need = plan_step(step)["memory"]
        block = render_memory(FACTS, max_tokens=need.max_tokens, tokens=need.tokens)
        out = assemble(step, answers={"memory": block})
        blocks.append(out.messages[0]["content"])
        assert out.kept is not None
        previous = out.kept
        assert assemble(replace(step, kept=out.kept)).messages == out.messages  # the turn's
    return blocks


def test_a_ratio_about_a_steps_edge_keeps_the_block_from_turn_to_turn() -> None:
    ratios = [EDGE * (0.98 if n % 2 else 1.02) for n in range(8)]
    assert factor_step(ratios[0]) != factor_step(ratios[1])  # each turn on the other side
    assert len(set(_blocks(ratios))) == 1


def test_a_ratio_that_rises_past_a_step_shrinks_the_block_at_once() -> None:
    """Within its share: a step up is never held back."""
    low, high = _blocks([EDGE * 0.98, EDGE * 1.02])
    assert len(high) < len(low)


def test_a_ratio_clearly_below_the_step_grows_the_block_back() -> None:
    blocks = _blocks([EDGE * 1.02, EDGE * 0.98, EDGE / FACTOR_STEP**0.6])
    assert blocks[0] == blocks[1] and len(blocks[2]) > len(blocks[1])


def test_factor_step_holds_the_previous_step_only_downwards() -> None:
    assert factor_step(EDGE * 0.98, previous=2) == 2
    assert factor_step(EDGE * 1.02, previous=1) == 2
    assert factor_step(EDGE / FACTOR_STEP**0.6, previous=2) == 1
    assert factor_step(EDGE * 0.98) == 1


def test_no_turn_of_a_sequence_sends_more_than_its_ratio_allows() -> None:
    """The hold only ever keeps a higher step (a smaller cap): along a ratio that rises past
    a held step, falls, flaps and rises again, each turn's block is at most the one its ratio
    alone gives, and a rise out of a held step shrinks the block at that turn."""
    ratios = [EDGE * f for f in (1.02, 0.98, 1.02 * FACTOR_STEP, 0.97, 1.01, 0.9, 1.3, 0.5)]
    held = _blocks(ratios)
    alone = [_blocks([ratio])[0] for ratio in ratios]
    assert all(len(h) <= len(a) for h, a in zip(held, alone, strict=True))
    assert held[1] == held[0] and len(held[2]) < len(held[1])  # held, then up at once


def test_a_row_kept_before_the_step_reads_as_no_step() -> None:
    """A session's ``turn_blocks`` written before the step was kept holds the block's text
    alone: the next turn starts with no step to hold, and the turn it was kept for sends the
    text it kept."""
    old = {"memory": "<memory>\nkept before\n</memory>"}
    assert _blocks([EDGE * 0.98]) == [_turn_block(EDGE * 0.98, previous=old)]
    kept = assemble(replace(_turn(EDGE * 0.98, {}, 0), kept=old))
    assert kept.messages[0]["content"].endswith(old["memory"])


def _turn_block(ratio: float, previous: Mapping[str, Any]) -> str:
    step = _turn(ratio, previous, 0)
    need = plan_step(step)["memory"]
    block = render_memory(FACTS, max_tokens=need.max_tokens, tokens=need.tokens)
    return str(assemble(step, answers={"memory": block}).messages[0]["content"])
