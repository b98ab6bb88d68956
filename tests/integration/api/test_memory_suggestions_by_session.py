"""``GET /v1/memory/suggestions?session_id=`` lists one session's pending suggestions: a
client showing one session (the console's memory prompt) read every suggestion of the
tenant, page after page, to keep its own. The id is checked as every session id is (a 400
``invalid_session_id`` naming ``session_id``), and a key limited to some agents still lists
only their sessions' suggestions."""

from __future__ import annotations

import re
from pathlib import Path

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

SUGGESTIONS = "/v1/memory/suggestions"


def _ids(resp: httpx.Response) -> list[str]:
    assert resp.status_code == 200, resp.text
    return [s["id"] for s in resp.json()["data"]]


def test_the_list_keeps_the_named_sessions_suggestions_and_pages_them(
    http: httpx.Client, db_dsn: str
) -> None:
    for session_id, sid in [("mine", "m1"), ("other", "o1"), ("mine", "m2"), ("other", "o2")]:
        suggest(db_dsn, session_id, sid, [f"fact {sid}"])
    assert _ids(http.get(SUGGESTIONS, params={"session_id": "mine"})) == ["m1", "m2"]
    first = http.get(SUGGESTIONS, params={"session_id": "mine", "limit": "1"})
    assert _ids(first) == ["m1"] and first.json()["has_more"] is True
    last = http.get(SUGGESTIONS, params={"session_id": "mine", "limit": "1", "offset": "1"})
    assert _ids(last) == ["m2"] and last.json()["has_more"] is False
    assert _ids(http.get(SUGGESTIONS, params={"session_id": "nobody"})) == []
    # empty is unset, as an empty query value is everywhere: every session's
    assert _ids(http.get(SUGGESTIONS, params={"session_id": ""})) == ["m1", "o1", "m2", "o2"]


@pytest.mark.parametrize("bad", ["..", "a b", "x" * 129, "s%2Fx", "é"])
def test_a_malformed_session_id_is_the_400_naming_it(http: httpx.Client, bad: str) -> None:
    resp = http.get(SUGGESTIONS, params={"session_id": bad})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "invalid_session_id"
    assert error["param"] == "session_id"
    assert "session_id query parameter" in error["message"]


def test_the_filter_is_documented(http: httpx.Client) -> None:
    operation = http.get("/openapi.json").json()["paths"][SUGGESTIONS]["get"]
    (param,) = [p for p in operation["parameters"] if p["name"] == "session_id"]
    assert param["in"] == "query" and param["required"] is False
    assert "session" in param["description"]
    pattern = re.compile(param["schema"]["pattern"])  # empty is the parameter unset
    ids = ["a.b:c-d_E", "", "..", "a/b", "a" * 129]
    assert [bool(pattern.search(s)) for s in ids] == [True, True, False, False, False]
    assert "invalid_session_id" in operation["responses"]["400"]["description"]


def test_a_limited_key_lists_none_of_another_agents_session(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    db_dsn: str,
) -> None:
    origin = start_with_limited_key(start_proxy, fake_upstream, tmp_path, monkeypatch).origin
    suggest(db_dsn, "coder-run", "c1", ["The coder deploys."], agent="coder", tenant=TENANT)
    suggest(db_dsn, "reviewer-run", "r1", ["Two approvals."], agent="reviewer", tenant=TENANT)
    with client(origin, LIMITED) as limited, client(origin, FULL) as full:
        assert _ids(limited.get(SUGGESTIONS, params={"session_id": "coder-run"})) == []
        assert _ids(limited.get(SUGGESTIONS, params={"session_id": "reviewer-run"})) == ["r1"]
        assert _ids(full.get(SUGGESTIONS, params={"session_id": "coder-run"})) == ["c1"]
