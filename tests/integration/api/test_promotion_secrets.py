"""Regression: with an agent's redaction off (or its default patterns off), memory promotion
sent the fast model the folded span as stored, secrets included, and a fact that restates
one in words no pattern reads ("the staging password is hunter2abc") passed
``sanitize_fact`` and was stored. The extraction now reads the span redacted with the
patterns a fact of its scope is checked with, so no fact can carry what they find."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import RecordedRequest, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import briefing
from tests.integration.api.conftest import write_config

SECRET = "hunter2abc"


def _model(req: RecordedRequest) -> Any:
    """A fast model that restates what the span says the password is, in words."""
    if "response_format" in req.json:
        span = req.json["messages"][1]["content"]
        found = re.search(r'"password": "([^"]+)"', span)
        said = found.group(1) if found else "unknown"
        fact = f"The staging database password is {said}"
        return reply(json.dumps({"facts": [fact, "The build uses uv"]}))
    if req.json.get("model") == "fast-model":
        return reply(briefing())
    return reply("ok")


@pytest.fixture(params=[{"enabled": False}, {"defaultPatterns": False}])
def config_path(
    tmp_path: Path, fake_upstream: FakeUpstream, request: pytest.FixtureRequest
) -> Path:
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        context={
            "summarize": {"keepRecent": 2},
            "memoryPromotion": {"mode": "auto"},
            "redaction": request.param,
        },
    )


def test_a_promoted_fact_never_restates_a_secret_of_the_span(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.default = _model
    messages: list[dict[str, Any]] = [{"role": "system", "content": "S"}]
    for text in (
        f'The staging config is {{"password": "{SECRET}", "host": "db"}}.',
        "We build with uv.",
        "Now fix the parser.",
    ):
        messages.append({"role": "user", "content": text})
        r = http.post(
            "/v1/chat/completions",
            headers={"x-session-id": "promo-secret"},
            json={"model": "m", "messages": messages},
        )
        assert r.status_code == 200, r.text
        messages.append({"role": "assistant", "content": "ok"})
    r = http.post("/v1/sessions/promo-secret/compact")
    assert r.status_code == 200 and r.json()["compacted"] is not False, r.text
    facts = [f["text"] for f in http.get("/v1/memory").json()["data"]]
    assert "The build uses uv" in facts
    assert not [f for f in facts if SECRET in f]
    # the summary reads the span as the agent's redaction leaves it (README, Redaction)
    fast = [b for b in fake_upstream.bodies() if b.get("model") == "fast-model"]
    extraction = [json.dumps(b) for b in fast if "response_format" in b]
    summary = [json.dumps(b) for b in fast if "response_format" not in b]
    assert extraction and summary and not [b for b in extraction if SECRET in b]
    assert all(SECRET in b for b in summary)
