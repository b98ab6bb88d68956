"""The session API's reads (the view, ``messages``, ``tool-outputs``) check a limited key's
reach as the request arrives, in a statement of its own, and read the session in later ones.
A request of another key may move the session to another agent between the two (its agent
and its first messages are one statement): the reads check the agent again once they have
read, and answer the arrival check's 403 when it changed, nothing of what they read sent,
so the limited key never sees that agent's new messages, its view, or a session another
agent made under an id that was free when checked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from proxy.api import sessions as api
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.limited_keys import FULL, LIMITED, client
from tests.integration.api.sessions_helpers import settled, tool_history
from tests.integration.api.test_agent_keys_sessions import server

__all__ = ["server"]  # the fixture: a proxy with the limited key, tool outputs cut at MAX_CHARS

SID = "raced"
MOVE = """
INSERT INTO sessions (tenant, id, agent) VALUES ('team', $1, 'coder')
ON CONFLICT (tenant, id) DO UPDATE SET agent = 'coder'
"""


def _moved_first(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The service's read ``name`` runs after the session is moved to the coder: the move
    lands between the key's check and the read."""
    read: Callable[..., Any] = getattr(api.svc, name)

    async def moved(pool: Any, *args: Any, **kwargs: Any) -> Any:
        await pool.execute(MOVE, kwargs["session_id"])
        return await read(pool, *args, **kwargs)

    monkeypatch.setattr(api.svc, name, moved)


def _reviewers_session(server: ProxyServer) -> None:
    """``SID``, the reviewer's session, with its tool output stored (by the unlimited key)."""
    with client(server.origin, FULL) as full:
        body = {"model": "reviewer", "messages": tool_history()}
        sent = full.post("/v1/chat/completions", json=body, headers={"x-session-id": SID})
        assert sent.status_code == 200, sent.text
        settled(full, SID, 4)


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("show_session", f"/v1/sessions/{SID}"),
        ("list_messages", f"/v1/sessions/{SID}/messages"),
        ("tool_output", f"/v1/sessions/{SID}/tool-outputs/call_ls"),
    ],
)
def test_a_read_that_raced_a_move_to_another_agent_is_refused(
    server: ProxyServer, monkeypatch: pytest.MonkeyPatch, name: str, path: str
) -> None:
    _reviewers_session(server)
    with client(server.origin, LIMITED) as limited:
        assert limited.get(path).status_code == 200  # the reviewer's session: the key's
        _moved_first(monkeypatch, name)
        raced = limited.get(path)
    assert raced.status_code == 403, raced.text
    error = raced.json()["error"]
    assert (error["type"], error["code"]) == ("request_forbidden", "agent_not_allowed")
    assert "'coder'" in error["message"]


def test_a_session_made_for_another_agent_after_the_check_is_refused(
    server: ProxyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing session passes the check (a 404 for every key); one another agent's
    request makes before the read is that agent's."""
    _moved_first(monkeypatch, "show_session")
    with client(server.origin, LIMITED) as limited:
        raced = limited.get("/v1/sessions/made-meanwhile")
    assert raced.status_code == 403, raced.text


@pytest.mark.parametrize(
    ("sid", "path"),
    [
        (SID, "/v1/sessions/{}/tool-outputs/call_none"),
        ("made-meanwhile", "/v1/sessions/{}/tool-outputs/call_ls"),
        ("made-meanwhile", "/v1/sessions/{}/messages"),
    ],
)
def test_a_read_that_finds_nothing_after_a_move_is_refused_too(
    server: ProxyServer, monkeypatch: pytest.MonkeyPatch, sid: str, path: str
) -> None:
    """Regression: a read that raced a move and found nothing (no output under the id, or
    the session made meanwhile holding none) answered its 404, never checking again, so
    the answer hung on the race: before the move the key gets that 404, after it the 403,
    and this 404 said what the moved session holds. Now an error of the read is answered
    only after the same second check, so the raced read is the 403 after the move."""
    _reviewers_session(server)
    with client(server.origin, LIMITED) as limited:
        if sid == SID:  # before the move: the 404 of an output the session does not hold
            assert limited.get(path.format(sid)).status_code == 404
        name = "tool_output" if "tool-outputs" in path else "list_messages"
        _moved_first(monkeypatch, name)
        raced = limited.get(path.format(sid))
    assert raced.status_code == 403, raced.text
    assert raced.json()["error"]["code"] == "agent_not_allowed"
