"""The replay's per-turn variant: its config, and the fake fast model's memory facts."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("uvicorn")

from bench import replay_driver, replay_policies, trajectories  # noqa: E402
from bench.replay_upstream import ReplayUpstream, build_facts  # noqa: E402
from proxy.cascade.memory import MEMORY_FACTS_FORMAT, extraction_prompt  # noqa: E402
from proxy.config import parse_config  # noqa: E402


def test_the_per_turn_variant_is_the_defaults_plus_the_per_turn_stages() -> None:
    default = replay_policies.proxy_config(32_000, "cascade-default", "http://127.0.0.1:1/v1")
    perturn = replay_policies.proxy_config(32_000, "cascade-perturn", "http://127.0.0.1:1/v1")
    assert default["context"] == {}
    assert perturn["context"] == replay_policies.PER_TURN_CONTEXT
    ctx = parse_config(perturn, {}).context_for("default")
    assert ctx.recitation.enabled and ctx.memory_promotion.mode == "suggest"
    auto = replay_policies.proxy_config(32_000, "cascade-perturn-auto", "http://127.0.0.1:1/v1")
    ctx = parse_config(auto, {}).context_for("default")
    assert ctx.recitation.enabled and ctx.memory_promotion.mode == "auto"


def test_the_extraction_request_gets_the_spans_file_paths_as_facts() -> None:
    span = "edited src/app/models.py and tests/test_models.py; see src/app/models.py"
    body = {
        "model": "fast-model",
        "messages": extraction_prompt(span),
        "response_format": MEMORY_FACTS_FORMAT,
    }
    message, log = ReplayUpstream().answer(body)
    assert log.fast
    assert json.loads(message["content"]) == {
        "facts": [
            "The task involves the file src/app/models.py.",
            "The task involves the file tests/test_models.py.",
        ]
    }
    # a summary request still gets a briefing
    briefing, _ = ReplayUpstream().answer({**body, "response_format": None})
    assert briefing["content"].startswith("## Objective")
    assert build_facts([{"role": "system", "content": "x"}]) == '{"facts": []}'


def test_the_per_turn_variant_has_retrieval_on_with_a_wait_no_load_can_time_out() -> None:
    perturn = replay_policies.proxy_config(32_000, "cascade-perturn", "http://127.0.0.1:1/v1")
    ctx = parse_config(perturn, {}).context_for("default")
    assert ctx.retrieval.enabled and ctx.retrieval.timeout_ms >= 10_000


def test_the_replay_waits_before_each_step_that_may_start_a_turn() -> None:
    """``before_turn`` runs before the steps whose history ends with a user message (where
    the per-turn replay waits for the embedder), and before no other step."""
    conv = trajectories.Conversation(
        "c",
        (
            {"role": "user", "content": "fix the bug"},
            {"role": "assistant", "content": None, "tool_calls": [_call("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "ok"},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "now the docs"},
            {"role": "assistant", "content": "done too"},
        ),
    )
    waited: list[tuple[str, int]] = []
    with ReplayUpstream() as up:
        errors = replay_driver.send_steps(
            [conv],
            base_url=up.url,  # straight to the upstream: the hook is the replay's own
            upstream=up,
            session_id=lambda c: f"s-{c}",
            before_turn=lambda sid: waited.append((sid, len(up.drain()))),
        )
        up.wait_idle()
    assert errors == 0
    # before step 0 (nothing sent yet) and step 2 (after steps 0 and 1), not before step 1
    assert waited == [("s-c", 0), ("s-c", 2)]


def _call(cid: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "run", "arguments": "{}"}}
