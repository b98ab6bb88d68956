"""The session API's requests name their session on the access line (``session_id``) and in
``X-Session-Id``, as chat requests do: an operator who follows one session through the log
(``jq 'select(.session_id == "…")'``) sees its reset, delete and reads too, and the reset's
line, which may carry ``session_wait_ms``, says which session it waited for."""

from __future__ import annotations

import httpx
import openai

from tests.integration.api.conftest import Records


def test_a_session_api_request_names_its_session(
    client: openai.OpenAI, http: httpx.Client, records: Records
) -> None:
    client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"X-Session-Id": "followed"},
    )
    answers = [
        http.get("/v1/sessions/followed/messages"),
        http.post("/v1/sessions/followed/reset"),
        http.delete("/v1/sessions/followed"),
    ]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert [a.headers.get("x-session-id") for a in answers] == ["followed"] * 3
    by_id = {line["request_id"]: line for line in records.access(4)}
    for answer in answers:
        assert by_id[answer.headers["x-request-id"]]["session_id"] == "followed"
    assert http.get("/v1/sessions").headers.get("x-session-id") is None  # names no session
