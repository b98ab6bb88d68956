"""How the session routes' errors word what was wrong.

A 400 for a bad query parameter names it in ``param`` as the client sent it (``limit``), as
the chat's 400s name their fields (``messages``) and the event stream its ``last_event_id``;
FastAPI's location prefix (``query.limit``) stays in the message only. A 404 quotes the
start of a huge id, not all of it."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.api.sessions_helpers import (
    chat,
    config_path,  # noqa: F401  (the module's config)
    settled,
    tool_history,
)

CASES = [
    ("/v1/sessions?limit=0", "limit"),
    ("/v1/sessions?offset=-1", "offset"),
    ("/v1/sessions/s/messages?limit=abc", "limit"),
    ("/v1/sessions/s/messages?form=raw", "form"),
    ("/v1/sessions/s/messages?include_superseded=maybe", "include_superseded"),
    ("/v1/sessions/s/tool-outputs/call_ls?limit=0", "limit"),
]


@pytest.mark.parametrize(("path", "param"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_query_parameter_is_named_as_sent(http: httpx.Client, path: str, param: str) -> None:
    chat(http, tool_history(), sid="s")
    settled(http, "s", 4)
    resp = http.get(path)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, None)
    assert error["message"].startswith(f"query.{param}: ")


def test_a_huge_tool_call_id_is_quoted_short_in_its_404(http: httpx.Client) -> None:
    """The 404 quoted the whole id, as long as a URL may be; it quotes its start, as a bad
    session id's 400 does."""
    chat(http, tool_history(), sid="s")
    settled(http, "s", 4)
    resp = http.get("/v1/sessions/s/tool-outputs/" + "x" * 5000)
    assert resp.status_code == 404, resp.text
    message = resp.json()["error"]["message"]
    assert "'xxxxxxxx" in message and "..." in message and len(message) < 400
