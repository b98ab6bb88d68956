"""``GET /v1/sessions?q=`` keeps the sessions whose id, agent or model holds the text, case
aside, before the page is cut: the console shows a page at a time and its filter still finds
any session, without reading the tenant's thousands of sessions on every visit."""

from __future__ import annotations

import httpx

from tests.integration.api.sessions_helpers import (
    MODEL,
    chat,
    config_path,  # noqa: F401  (the module's config)
    settled,
    user,
)


def _ids(http: httpx.Client, **params: object) -> tuple[list[str], bool]:
    resp = http.get("/v1/sessions", params=params)
    assert resp.status_code == 200, resp.text
    return [s["id"] for s in resp.json()["data"]], resp.json()["has_more"]


def test_q_keeps_the_sessions_whose_id_agent_or_model_holds_it(http: httpx.Client) -> None:
    for sid in ("Alpha-1", "beta_2", "gamma.3"):
        chat(http, [user(f"hi {sid}")], sid=sid)
        settled(http, sid, 2)
    assert _ids(http, q="ALPHA") == (["Alpha-1"], False)  # case aside
    assert _ids(http, q="_") == (["beta_2"], False)  # a character as it is, no wildcard
    assert _ids(http, q="%") == ([], False)
    assert _ids(http, q="default") == (["gamma.3", "beta_2", "Alpha-1"], False)  # the agent
    assert _ids(http, q=MODEL.upper()) == (["gamma.3", "beta_2", "Alpha-1"], False)
    # filtered before the page is cut: the page holds matches only, and says more follow
    assert _ids(http, q="a", limit=1) == (["gamma.3"], True)
    assert _ids(http, q="a", limit=1, offset=2) == (["Alpha-1"], False)
    assert _ids(http, q="") == (["gamma.3", "beta_2", "Alpha-1"], False)  # empty is unset
    assert _ids(http, q="nowhere") == ([], False)


def test_a_q_no_session_could_hold_is_the_400_naming_it(http: httpx.Client) -> None:
    for q in ("a\x00b", "x" * 1001):
        resp = http.get("/v1/sessions", params={"q": q})
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["param"] == "q"
