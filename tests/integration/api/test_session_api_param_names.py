"""A session route's 400 for a bad query parameter names it in ``param`` as the client sent
it (``limit``), as the chat's 400s name their fields (``messages``) and the event stream its
``last_event_id``; FastAPI's location prefix (``query.limit``) stays in the message only."""

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
