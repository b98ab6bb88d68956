"""The replay's per-turn variant: its config, and the fake fast model's memory facts."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("uvicorn")

from bench import replay  # noqa: E402
from bench.replay_upstream import ReplayUpstream, build_facts  # noqa: E402
from proxy.cascade.memory import MEMORY_FACTS_FORMAT, extraction_prompt  # noqa: E402
from proxy.config import parse_config  # noqa: E402


def test_the_per_turn_variant_is_the_defaults_plus_the_per_turn_stages() -> None:
    default = replay.proxy_config(32_000, "cascade-default", "http://127.0.0.1:1/v1")
    perturn = replay.proxy_config(32_000, "cascade-perturn", "http://127.0.0.1:1/v1")
    assert default["context"] == {}
    assert perturn["context"] == replay.PER_TURN_CONTEXT
    ctx = parse_config(perturn, {}).context_for("default")
    assert ctx.recitation.enabled and ctx.memory_promotion.mode == "suggest"
    auto = replay.proxy_config(32_000, "cascade-perturn-auto", "http://127.0.0.1:1/v1")
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
