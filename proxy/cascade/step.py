"""The stage seam: what every stage is given, and what makes a function a stage.

A stage is a pure function ``run(messages, step) -> StageResult`` (``types.StageResult``:
the messages it passes on, its events, and the ``Marks`` the shell persists), named and
switched on by the config. ``pipeline.assemble`` runs one ordered tuple of them.

A stage that needs I/O (an embedding and a vector search, a row the store must read) also
has a pure ``plan(step) -> need``: a small frozen value saying what it needs, or None. The
shell collects every stage's need (``pipeline.plan_step``), fulfils them in one place
(``services/needs.py``), and passes the answers back in ``StepInput.answers`` under the
stage's name, the way httpx's ``Auth.auth_flow`` yields a request and is sent the response.
The stage itself never waits for anything.

Two phases. A per-step stage runs on every request. A per-turn stage (``per_turn=True``:
recitation, memory injection, retrieval) computes its value once per turn, when a new user
message arrives, and every later step of that turn (the agent's tool loop) reuses that value
byte for byte, so the block it places never changes the prompt prefix mid-turn. Its value is
its answer: what its fulfiller fetched for its plan, or what its pure ``answer(step)``
computed (a stage that needs no I/O). ``pipeline.assemble`` hands the stage the value kept
for the turn (``StepInput.kept``) instead of asking again, and returns the values it
computed (``Assembled.kept``) for the shell to store with the turn. A value must be JSON
(str, number, bool, None, lists and objects of them): it is stored as JSON text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.cascade.types import Budget, Message, StageResult, TokenCounter
from proxy.config_context import ContextConfig

__all__ = ["StepInput", "Stage", "StageFn", "Planner", "always"]


@dataclass(frozen=True, slots=True)
class StepInput:
    """Everything a step's stages read: the window, the summary, the budget and the config.

    ``answers`` holds what the shell fetched for the stages' plans, keyed by stage name;
    ``kept`` the values of the per-turn stages kept for this step's turn (empty at a new
    turn: the per-turn stages then run and their values are kept). ``positions`` holds each
    window message's position in the session's history, for the handles that name one
    result alone (``pins.py``); empty when unknown. ``previous`` holds the values the
    session kept for its last turn, whichever it was (a stage that steps with the pressure
    reads where it stood, ``memory_block.factor_step``).
    """

    window: tuple[Message, ...]
    system_count: int
    summary: str | None
    count: TokenCounter
    budget: Budget
    ctx: ContextConfig
    unspillable: frozenset[str] = frozenset()
    ratio: float = 1.0
    answers: Mapping[str, Any] = field(default_factory=dict)
    kept: Mapping[str, Any] = field(default_factory=dict)
    positions: tuple[int, ...] = ()
    previous: Mapping[str, Any] = field(default_factory=dict)


class StageFn(Protocol):
    def __call__(self, messages: tuple[Message, ...], step: StepInput, /) -> StageResult: ...


class Planner(Protocol):
    def __call__(self, step: StepInput, /) -> object | None: ...


def always(ctx: ContextConfig) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Stage:
    """One entry of the stage tuple: its name (the key of its answer), its pure function,
    when the config runs it, and, for a stage that needs I/O, its pure plan.

    ``per_turn`` makes it a per-turn stage (module docstring): its answer is computed at the
    turn's first step and reused on the others. ``answer`` computes that value purely, for
    a per-turn stage without a plan, or from its fulfilled answer (in ``step.answers``) for
    one with a plan; ``run`` then reads it from ``step.answers[name]`` as an I/O stage
    reads its fulfilled answer."""

    name: str
    run: StageFn
    enabled: Callable[[ContextConfig], bool] = always
    plan: Planner | None = None
    per_turn: bool = False
    answer: Callable[[StepInput], Any] | None = None
    made_of: Callable[[StepInput], str] | None = None
    """For a per-turn stage without a plan: a digest of what its value is made from. When
    it differs from the one kept with the value, the turn's value is made again (the turn,
    for this stage, ends there), so the kept value follows a change the prompt's head
    already paid for (recitation: a new summary)."""
