"""Regression: a proxy key limited to some agents reads ``global`` facts (they go into every
agent's prompts), and each fact named the session it came from (``source_session``): the
ids of sessions of agents the key may not use, which it may not list or open. Such a key
now sees a fact's source session only when that session runs an agent the key may use,
else ``null`` (a deleted session's too: its agent is unknown); the API, and so the CLI,
answer the same. A key without ``agents`` sees every source session, as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy import cli
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy
from tests.integration.api.limited_keys import (
    FULL,
    LIMITED,
    TENANT,
    client,
    start_with_limited_key,
)
from tests.integration.api.memory_suggestions import suggest
from tests.integration.conftest import execute, run_sync

FACTS = {
    "coder-run": ("coder", "The coder deploys to build-7."),
    "default-run": ("default", "The repo uses uv."),
    "reviewer-run": ("reviewer", "Reviews need two approvals."),
    "gone-run": ("reviewer", "The API port is 8443."),
}


@pytest.fixture
def origin(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    db_dsn: str,
) -> str:
    """Four global facts, each accepted from a suggestion of a session of its own; the
    session of the last is deleted since."""
    origin = start_with_limited_key(start_proxy, fake_upstream, tmp_path, monkeypatch).origin
    with client(origin, FULL) as full:
        for session_id, (agent, fact) in FACTS.items():
            suggest(db_dsn, session_id, fact, [fact], agent=agent, tenant=TENANT, scope="global")
            answer = full.post(f"/v1/memory/suggestions/{fact}/accept")
            assert answer.status_code == 200, answer.text
        assert full.delete("/v1/sessions/gone-run").status_code == 200
    return origin


def _sources(data: list[dict[str, object]]) -> dict[object, object]:
    return {fact["text"]: fact["source_session"] for fact in data}


def test_a_limited_key_sees_only_the_source_sessions_of_its_agents(origin: str) -> None:
    with client(origin, LIMITED) as limited, client(origin, FULL) as full:
        seen = limited.get("/v1/memory", params={"scope": "global"})
        assert seen.status_code == 200, seen.text
        assert _sources(seen.json()["data"]) == {
            "The coder deploys to build-7.": None,
            "The repo uses uv.": None,
            "Reviews need two approvals.": "reviewer-run",
            "The API port is 8443.": None,
        }
        everything = _sources(full.get("/v1/memory").json()["data"])
    assert everything == {fact: sid for sid, (_, fact) in FACTS.items()}


def test_a_session_moved_to_the_keys_agent_is_named_again(origin: str, db_dsn: str) -> None:
    """The rule follows the session's agent now, as ``GET /v1/sessions`` does."""
    moved = "UPDATE sessions SET agent = 'reviewer' WHERE id = 'coder-run'"
    run_sync(execute(db_dsn, moved))
    with client(origin, LIMITED) as limited:
        sources = _sources(limited.get("/v1/memory").json()["data"])
    assert sources["The coder deploys to build-7."] == "coder-run"


def test_the_cli_of_a_limited_key_shows_no_other_agents_session(
    origin: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CASCADE_API_KEY", LIMITED)
    assert cli.main(["memory", "--url", origin, "ls", "--json"]) == 0
    out = capsys.readouterr().out
    assert "coder-run" not in out and "default-run" not in out and "gone-run" not in out
    assert _sources(json.loads(out)["data"])["Reviews need two approvals."] == "reviewer-run"
