"""Regression: a session's ``parent_id`` (the session it was branched from) was shown to a
proxy key limited to some agents whatever agent that parent runs: a branch of the coder's
session, moved to the reviewer since, named the coder's session to a key that may not list
or open it. Such a key now sees ``parent_id`` only when the parent runs one of its agents,
else null, in the list and the view, as a memory fact's ``source_session``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy
from tests.integration.api.limited_keys import FULL, LIMITED, client, start_with_limited_key


def _chat(http: object, session_id: str, agent: str) -> None:
    body = {"model": agent, "messages": [{"role": "user", "content": f"hello {agent}"}]}
    sent = http.post(  # type: ignore[attr-defined]
        "/v1/chat/completions", json=body, headers={"x-session-id": session_id}
    )
    assert sent.status_code == 200, sent.text


@pytest.fixture
def origin(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    """``coder-run`` (the coder's), ``branch-run`` branched from it and moved to the
    reviewer, and ``twig`` branched from ``branch-run`` (the reviewer's)."""
    origin = start_with_limited_key(start_proxy, fake_upstream, tmp_path, monkeypatch).origin
    with client(origin, FULL) as full:
        _chat(full, "coder-run", "coder")
        made = full.post("/v1/sessions/coder-run/branch", json={"id": "branch-run"})
        assert made.status_code == 200, made.text
        _chat(full, "branch-run", "reviewer")
        made = full.post("/v1/sessions/branch-run/branch", json={"id": "twig"})
        assert made.status_code == 200, made.text
    return origin


def test_a_limited_key_sees_only_the_parents_of_its_agents(origin: str) -> None:
    with client(origin, LIMITED) as limited, client(origin, FULL) as full:
        listed = {s["id"]: s["parent_id"] for s in limited.get("/v1/sessions").json()["data"]}
        assert listed == {"branch-run": None, "twig": "branch-run"}
        assert limited.get("/v1/sessions/branch-run").json()["parent_id"] is None
        assert limited.get("/v1/sessions/twig").json()["parent_id"] == "branch-run"
        everything = {s["id"]: s["parent_id"] for s in full.get("/v1/sessions").json()["data"]}
        assert everything["branch-run"] == "coder-run"
        assert full.get("/v1/sessions/branch-run").json()["parent_id"] == "coder-run"
