"""An agent's ``auto`` promotion stores a fact that only a pending suggestion for ``global``
holds: no prompt carries a suggestion nobody has answered, and one rejected (the fact is
the agent's, not every agent's) would leave the fact in no scope at all."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import write_config
from tests.integration.api.test_memory_promotion import Model
from tests.integration.api.test_promotion_global_facts import NEW, REMEMBERED, _run

PENDING = "Releases are tagged vX.Y.Z"


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    auto = {"memoryPromotion": {"mode": "auto"}}
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        agents={
            "default": {"provider": "openai", "fastModel": "fast-model"},
            "coder": {"provider": "openai", "fastModel": "fast-model", "context": auto},
        },
        context={"summarize": {"keepRecent": 2}, "memoryPromotion": {"mode": "suggest"}},
    )


def test_an_agents_auto_promotion_stores_what_a_pending_global_suggestion_holds(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    r = http.post("/v1/memory", json={"scope": "global", "text": REMEMBERED})
    assert r.status_code == 201, r.text
    fake_upstream.default = Model(reply(json.dumps({"facts": [PENDING]})))
    _run(http, "global-run", "m")  # global's promotion suggests: PENDING is pending
    assert http.get("/v1/memory", params={"scope": "global"}).json()["data"][0]["text"] == (
        REMEMBERED
    )
    fake_upstream.default = Model(reply(json.dumps({"facts": [REMEMBERED, NEW, PENDING]})))
    _run(http, "coder-run", "coder")
    stored = http.get("/v1/memory", params={"scope": "agent:coder"}).json()["data"]
    assert [f["text"] for f in stored] == [NEW, PENDING]
