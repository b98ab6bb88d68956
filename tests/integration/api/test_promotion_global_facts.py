"""An agent's promotion leaves out the facts ``global`` holds: its sessions' prompts carry
``global`` beside the agent's scope, so such a fact was suggested again (a person asked to
remember what is remembered) or stored a second time (``auto``), in the agent's scope. A
fact only a pending suggestion for ``global`` holds is still suggested for the agent's scope:
the two are different questions, and the first may be rejected."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import write_config
from tests.integration.api.test_memory_promotion import Model, _events

REMEMBERED = "The server listens on port 8443"
NEW = "The build uses uv"


@pytest.fixture(params=["suggest", "auto"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream, mode: str) -> Path:
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        agents={
            "default": {"provider": "openai", "fastModel": "fast-model"},
            "coder": {"provider": "openai", "fastModel": "fast-model"},
        },
        context={"summarize": {"keepRecent": 2}, "memoryPromotion": {"mode": mode}},
    )


def test_a_fact_global_holds_is_not_promoted_to_an_agents_scope(
    http: httpx.Client, fake_upstream: FakeUpstream, db_dsn: str, mode: str
) -> None:
    r = http.post("/v1/memory", json={"scope": "global", "text": REMEMBERED})
    assert r.status_code == 201, r.text
    pending = "Releases are tagged vX.Y.Z"  # a pending suggestion for global holds it
    fake_upstream.default = Model(reply(json.dumps({"facts": [pending]})))
    _run(http, "global-run", "m")
    said = [f" {REMEMBERED.upper()} ", NEW, pending]  # case and spacing aside
    fake_upstream.default = Model(reply(json.dumps({"facts": said})))
    _run(http, "coder-run", "coder")
    if mode == "auto":
        stored = http.get("/v1/memory", params={"scope": "agent:coder"}).json()["data"]
        assert [f["text"] for f in stored] == [NEW]
    else:
        # the pending suggestion for global is asked of the agent's scope too: a rejection
        # of one ("not every agent's") is no answer to the other ("this agent's")
        (event,) = _events(db_dsn, "coder-run")
        assert event["facts"] == [NEW, pending] and event["scope"] == "agent:coder"
        (held,) = _events(db_dsn, "global-run")
        r = http.post(f"/v1/memory/suggestions/{held['suggestion_id']}/reject")
        assert r.status_code == 200, r.text
        r = http.post(f"/v1/memory/suggestions/{event['suggestion_id']}/accept")
        assert r.status_code == 200, r.text
        stored = http.get("/v1/memory", params={"scope": "agent:coder"}).json()["data"]
        assert [f["text"] for f in stored] == [NEW, pending]


def _run(http: httpx.Client, sid: str, model: str) -> None:
    messages: list[dict[str, str]] = [{"role": "system", "content": "S"}]
    for text in ("We listen on port 8443.", "We build with uv.", "Now fix the parser."):
        messages.append({"role": "user", "content": text})
        r = http.post(
            "/v1/chat/completions",
            headers={"x-session-id": sid},
            json={"model": model, "messages": messages},
        )
        assert r.status_code == 200, r.text
        messages.append({"role": "assistant", "content": "ok"})
    r = http.post(f"/v1/sessions/{sid}/compact")
    assert r.status_code == 200 and r.json()["compacted"] is not False, r.text
