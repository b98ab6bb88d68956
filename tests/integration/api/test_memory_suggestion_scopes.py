"""Regression: a proxy key limited to some agents could not add a fact to another agent's
scope (403), yet accepting a pending suggestion bound for that scope stored the facts there
(and answered with them), and rejecting one dismissed it. Answering a suggestion now needs
the same reach as adding to its scope, and the use of its session's agent: its facts are
read from that session, the ``default`` agent's included, whose facts go to ``global``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

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


@pytest.fixture
def server_origin(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    return start_with_limited_key(start_proxy, fake_upstream, tmp_path, monkeypatch).origin


def _suggest(dsn: str, session_id: str, agent: str, fact: str, **extra: Any) -> None:
    """A pending suggestion of one fact, named by the fact."""
    suggest(dsn, session_id, fact, [fact], agent=agent, tenant=TENANT, **extra)


def assert_unknown(refused: httpx.Response, sid: str, limited: httpx.Client, answer: str) -> None:
    """``refused`` is, byte for byte, the answer to an id no suggestion has: a key is shown
    no suggestion it may not answer (``GET /v1/memory/suggestions``), so whether one exists
    under an id is not its to learn."""
    unknown = limited.post(f"/v1/memory/suggestions/{sid} (none)/{answer}")
    assert refused.status_code == unknown.status_code == 404, refused.text
    assert refused.json() == {
        "error": {**unknown.json()["error"], "message": _message(unknown, f"{sid} (none)", sid)}
    }


def _message(unknown: httpx.Response, unknown_id: str, sid: str) -> str:
    return str(unknown.json()["error"]["message"]).replace(repr(unknown_id), repr(sid))


@pytest.mark.parametrize("answer", ["accept", "reject"])
def test_a_limited_key_cannot_answer_a_suggestion_for_another_agents_scope(
    server_origin: str, db_dsn: str, answer: str
) -> None:
    _suggest(db_dsn, "coder-run", "coder", "The coder deploys to build-7.")
    _suggest(db_dsn, "any-run", "reviewer", "The API port is 8443.", scope="agent:coder")
    with client(server_origin, LIMITED) as limited, client(server_origin, FULL) as full:
        for sid in ("The coder deploys to build-7.", "The API port is 8443."):
            refused = limited.post(f"/v1/memory/suggestions/{sid}/{answer}")
            assert_unknown(refused, sid, limited, answer)
        assert full.get("/v1/memory", params={"scope": "agent:coder"}).json()["data"] == []
        pending = {s["id"] for s in full.get("/v1/memory/suggestions").json()["data"]}
        assert pending == {"The coder deploys to build-7.", "The API port is 8443."}
        # the key with every agent still answers them
        assert full.post(f"/v1/memory/suggestions/The API port is 8443./{answer}").is_success


def test_a_limited_key_answers_suggestions_of_its_agents_sessions_for_it_and_global(
    server_origin: str, db_dsn: str
) -> None:
    _suggest(db_dsn, "reviewer-run", "reviewer", "Reviews need two approvals.")
    _suggest(db_dsn, "reviewer-run", "reviewer", "The repo uses uv.", scope="global")
    with client(server_origin, LIMITED) as limited:
        ok = limited.post("/v1/memory/suggestions/Reviews need two approvals./accept")
        assert ok.status_code == 200, ok.text
        assert ok.json()["scope"] == "agent:reviewer"
        ok = limited.post("/v1/memory/suggestions/The repo uses uv./reject")
        assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("answer", ["accept", "reject"])
def test_a_limited_key_cannot_answer_a_suggestion_of_the_default_agents_session(
    server_origin: str, db_dsn: str, answer: str
) -> None:
    """Regression: a ``default`` session's suggestion is bound for ``global``, which the key
    reaches, so a key limited to ``reviewer`` answered it, and saw its facts listed. The 403
    named the suggestion's session, one of an agent the key may not use; now the answer is
    an unknown id's 404, which names neither."""
    _suggest(db_dsn, "default-run", "default", "The repo uses uv.")
    _suggest(db_dsn, "coder-run", "coder", "Deploys go through CI.", scope="agent:reviewer")
    with client(server_origin, LIMITED) as limited, client(server_origin, FULL) as full:
        for sid in ("The repo uses uv.", "Deploys go through CI."):
            refused = limited.post(f"/v1/memory/suggestions/{sid}/{answer}")
            assert_unknown(refused, sid, limited, answer)
            said = refused.json()["error"]["message"]
            assert "-run" not in said and "default" not in said and "coder" not in said, said
        assert limited.get("/v1/memory/suggestions").json()["data"] == []
        assert limited.get("/v1/memory").json()["data"] == []  # nothing reached global
        for scope in ("agent:default", "agent:coder"):  # nor another agent's own scope
            refused = limited.get("/v1/memory", params={"scope": scope})
            assert refused.status_code == 403, (scope, refused.text)
        assert len(full.get("/v1/memory/suggestions").json()["data"]) == 2
        assert full.post(f"/v1/memory/suggestions/The repo uses uv./{answer}").is_success


def test_a_limited_key_lists_only_the_suggestions_it_may_answer(
    server_origin: str, db_dsn: str
) -> None:
    """Regression: the list showed a key limited to some agents every pending suggestion of
    the tenant, those for other agents' scopes too (their facts included), though answering
    them is a 403. ``limit`` and ``offset`` count the suggestions the key sees."""
    for i in range(3):
        _suggest(db_dsn, "coder-run", "coder", f"The coder deploys to build-{i}.")
    _suggest(db_dsn, "any-run", "reviewer", "The API port is 8443.", scope="agent:coder")
    _suggest(db_dsn, "reviewer-run", "reviewer", "Reviews need two approvals.")
    _suggest(db_dsn, "default-run", "default", "The repo uses uv.")
    _suggest(db_dsn, "reviewer-run", "reviewer", "The CI runs on push.", scope="global")
    with client(server_origin, LIMITED) as limited, client(server_origin, FULL) as full:
        seen = limited.get("/v1/memory/suggestions").json()["data"]
        assert [s["id"] for s in seen] == ["Reviews need two approvals.", "The CI runs on push."]
        assert [s["scope"] for s in seen] == ["agent:reviewer", "global"]
        first = limited.get("/v1/memory/suggestions", params={"limit": 1}).json()["data"]
        assert [s["id"] for s in first] == ["Reviews need two approvals."]
        # an offset counts them too: the second the key sees, not the tenant's second
        second = limited.get("/v1/memory/suggestions", params={"limit": 1, "offset": 1}).json()
        assert ([s["id"] for s in second["data"]], second["has_more"]) == (
            ["The CI runs on push."],
            False,
        )
        everything = full.get("/v1/memory/suggestions").json()["data"]
        assert len(everything) == 7
        assert sum(s["scope"] == "agent:coder" for s in everything) == 4


@pytest.mark.parametrize("answer", ["accept", "reject"])
def test_a_limited_key_learns_nothing_of_an_answered_suggestion_it_may_not_answer(
    server_origin: str, db_dsn: str, answer: str
) -> None:
    """Regression: once the key with every agent had answered another agent's suggestion, a
    key limited to ``reviewer`` got the 400 "was accepted already" for its id, where an
    unknown id is a 404: whether a suggestion is pending, answered or none at all is the
    same 404 to a key that may not answer it."""
    _suggest(db_dsn, "coder-run", "coder", "The coder deploys to build-7.")
    sid = "The coder deploys to build-7."
    with client(server_origin, LIMITED) as limited, client(server_origin, FULL) as full:
        assert full.post(f"/v1/memory/suggestions/{sid}/accept").is_success
        assert full.post(f"/v1/memory/suggestions/{sid}/{answer}").status_code == 400
        assert_unknown(limited.post(f"/v1/memory/suggestions/{sid}/{answer}"), sid, limited, answer)
