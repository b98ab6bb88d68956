from __future__ import annotations

import json
from typing import Any

from proxy.cascade.eviction import evict
from proxy.cascade.observations import (
    is_observation,
    manage_observations,
    observation_id,
    observation_ids,
)
from proxy.cascade.overflow import calibrated_count
from proxy.cascade.pipeline import assemble
from proxy.cascade.rounds import group_rounds
from proxy.cascade.step import StepInput
from proxy.cascade.types import Budget
from proxy.config_context import ContextConfig, EvictionConfig
from tests.unit.cascade.builders import assistant, count, system, user

PREFIXES = ("Observation:",)
CTX = ContextConfig.model_validate({"eviction": {"enabled": False}})
LOG = "Observation: " + "\n".join(["retrying connection"] * 300 + ["done"])
DUMP = "Observation: " + json.dumps(
    {"rows": [{"id": i, "v": "x" * 20} for i in range(80)]}, indent=2
)


def agent(observations: list[str]) -> list[dict[str, Any]]:
    """smolagents-shaped text actions: Thought/Action as assistant text, Observation as user."""
    msgs: list[dict[str, Any]] = [system("You are an agent."), user("New task: count rows")]
    for i, obs in enumerate(observations):
        msgs.append(assistant(f'Thought: step {i}\nAction:\n{{"name": "run", "i": {i}}}'))
        msgs.append(user(obs))
    return msgs


def step(window: list[dict[str, Any]], ctx: ContextConfig = CTX, **kw: Any) -> StepInput:
    budget = kw.pop("budget", Budget(limit=1_000_000, reserved_output=0, occupancy=0))
    return StepInput(
        window=tuple(window),
        system_count=1,
        summary=None,
        count=count,
        budget=budget,
        ctx=ctx,
        **kw,
    )


def test_observation_needs_prefix_an_assistant_before_and_not_latest() -> None:
    msgs = agent(["Observation: a", "Observation: b"])
    assert [i for i in range(len(msgs)) if is_observation(msgs, i, PREFIXES)] == [3]
    assert is_observation(msgs, 5, PREFIXES, latest_too=True)
    assert not is_observation(msgs, 1, PREFIXES)  # the task: after the system message
    assert not is_observation(msgs, 3, ())


def test_handle_is_stable_and_named_by_the_rewrite() -> None:
    msgs = agent([LOG, "Observation: next"])
    oid = observation_id(msgs[3])
    assert oid.startswith("obs_") and oid == observation_id(dict(msgs[3]))
    out = manage_observations(tuple(msgs), step(msgs))
    assert out.marks.evicted == (3,)
    rewritten = out.messages[3]
    assert rewritten["role"] == "user" and rewritten["content"].startswith("Observation:")
    assert "[previous line repeated 298 more times]" in rewritten["content"]
    assert f'read_tool_output({{"id": "{oid}"}})' in rewritten["content"]
    assert observation_id(rewritten) == oid
    again = manage_observations(out.messages, step(list(out.messages)))
    assert again.marks.evicted == () and again.messages == out.messages


def test_latest_observation_goes_as_sent() -> None:
    msgs = agent([LOG])
    out = manage_observations(tuple(msgs), step(msgs))
    assert out.messages == tuple(msgs) and out.marks.evicted == ()


def test_long_observation_is_truncated_with_a_handle_unless_redacted() -> None:
    big = "Observation: " + "".join(f"line {i} {i * 7919 % 10007}\n" for i in range(3000))
    msgs = agent([big, "Observation: ok"])
    oid = observation_id(msgs[3])
    out = manage_observations(tuple(msgs), step(msgs))
    content = out.messages[3]["content"]
    assert len(content) <= CTX.tool_output.max_chars and content.startswith("Observation: line 0")
    assert f'"id": "{oid}", "offset"' in content
    hidden = manage_observations(tuple(msgs), step(msgs, unspillable=frozenset({oid})))
    assert "read_tool_output" not in hidden.messages[3]["content"]


def test_round_is_the_assistant_and_its_observation() -> None:
    msgs = agent(["Observation: a", "Observation: b"])
    rounds = group_rounds(msgs, PREFIXES)
    assert [(r.start, r.end) for r in rounds] == [(2, 4), (4, 6)]
    assert group_rounds(msgs) == ()


def test_eviction_clears_old_observations_by_handle() -> None:
    msgs = agent([DUMP, DUMP.replace("x", "y"), DUMP.replace("x", "z"), "Observation: last"])
    ids = observation_ids(msgs, PREFIXES)
    cfg = EvictionConfig(keep_recent_rounds=1, clear_at_least=100, min_result_tokens=50)
    out = evict(
        msgs,
        count=count,
        budget=Budget(limit=10_000, reserved_output=0, occupancy=9_000),
        cfg=cfg,
        persist_raw=True,
        prefixes=PREFIXES,
    )
    assert out.marks.evicted == (3, 5, 7)
    for i in (3, 5, 7):
        assert out.messages[i]["role"] == "user"
        assert f'read_tool_output({{"id": "{ids[i]}"}})' in out.messages[i]["content"]


def test_assemble_offers_the_read_tool_for_a_rewritten_observation() -> None:
    msgs = agent([LOG, "Observation: next"])
    done = assemble(step(msgs))
    assert done.evicted == (3,) and done.offer_read_tool


def test_latest_observation_is_cut_when_the_guard_would_refuse_the_prompt() -> None:
    """The cut counts what the guard cannot drop (the system prompt, the task, the action),
    not the observation alone: one that alone fits but not with them is cut, not refused."""
    ctx = ContextConfig.model_validate(
        {"eviction": {"enabled": False}, "toolOutput": {"maxChars": 2000}}
    )
    big = "Observation: " + "".join(f"line {i} {i * 7919 % 10007}\n" for i in range(400))
    msgs = agent([big])
    msgs[0] = system("You are an agent. " * 40)
    oid = observation_id(msgs[3])
    for limit in (1600, 1000):  # the observation alone fits 1600, the prompt does not
        done = assemble(step(msgs, ctx, budget=Budget(limit, 0, 0)))
        assert done.evicted == (3,) and f'"id": "{oid}", "offset"' in done.messages[3]["content"]
    fits = assemble(step(msgs, ctx, budget=Budget(2000, 0, 0)))
    assert fits.evicted == () and fits.messages[3] == msgs[3]
    at = calibrated_count(count, 1.0)(msgs)  # just at the budget: sent whole, as the guard does
    assert assemble(step(msgs, ctx, budget=Budget(at, 0, 0))).evicted == ()
    assert assemble(step(msgs, ctx, budget=Budget(at - 1, 0, 0))).evicted == (3,)
