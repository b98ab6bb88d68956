"""context.usage names the request of its turn."""

from __future__ import annotations

import httpx

from tests.integration.transcripts import wait_event


def test_a_turns_usage_event_names_its_request(http: httpx.Client) -> None:
    """context.usage names the turn's request by the client's ``X-Request-Id``: the console
    tells its own turns from another client's by it."""
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    ids = {"x-session-id": "named-turn", "x-request-id": "ui-0123abcd"}
    assert http.post("/v1/chat/completions", json=chat, headers=ids).is_success
    usage = wait_event(http, "named-turn", "context.usage")
    assert usage["request_id"] == "ui-0123abcd"
