"""``GET /v1/sessions`` shows each session as ``GET /v1/sessions/{id}`` does, in part.

The list rows were the table's columns: ``head_len`` beside ``message_count`` (the same
count under the column's name) and the estimate as ``last_estimate`` where the session's
view calls it ``last_estimated_tokens``, so a client reading both saw one value under two
names. Every field of a list row is now one of the view's, with the view's value.
"""

from __future__ import annotations

import httpx

from tests.integration.api.sessions_helpers import (
    chat,
    config_path,  # noqa: F401  (the module's config)
    settled,
    user,
)


def test_each_listed_session_has_the_fields_and_values_of_its_view(http: httpx.Client) -> None:
    for sid in ("one", "two"):
        chat(http, [user(f"hello {sid}")], sid=sid)
        settled(http, sid, 2)
    http.post("/v1/sessions/one/branch", json={"id": "one-b"}).raise_for_status()
    http.post("/v1/sessions/two/reset").raise_for_status()
    listed = http.get("/v1/sessions").json()["data"]
    assert sorted(s["id"] for s in listed) == ["one", "one-b", "two"]
    for row in listed:
        view = http.get(f"/v1/sessions/{row['id']}").json()
        assert set(row) <= set(view), set(row) - set(view)
        assert row == {k: view[k] for k in row}
        assert {"object", "message_count", "occupancy", "last_estimated_tokens"} <= set(row)
