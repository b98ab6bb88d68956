"""The memory lists page by an opaque cursor as well as by offset. A client that works
through the pending suggestions a page at a time answers each page's before it reads the
next: the answered ones leave the list, so the next offset page starts that many rows too
far and skips as many suggestions; a fact deleted while paging the facts does the same. A
``next_cursor`` names the place after the page's last row, which rows leaving do not move."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.api.memory_suggestions import suggest
from tests.integration.api.sessions_helpers import config_path  # noqa: F401


def _page(http: httpx.Client, path: str, **params: Any) -> dict[str, Any]:
    resp = http.get(path, params=params)
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def test_answering_a_page_of_suggestions_skips_none_of_the_next(
    http: httpx.Client, db_dsn: str
) -> None:
    for n in range(5):
        suggest(db_dsn, "s1", f"sug-{n}", [f"fact {n}"])
    first = _page(http, "/v1/memory/suggestions", limit=2)
    assert [s["id"] for s in first["data"]] == ["sug-0", "sug-1"]
    for s in first["data"]:
        assert http.post(f"/v1/memory/suggestions/{s['id']}/reject").status_code == 200
    skipped = _page(http, "/v1/memory/suggestions", limit=2, offset=2)
    assert [s["id"] for s in skipped["data"]] == ["sug-4"]  # what offset paging does
    second = _page(http, "/v1/memory/suggestions", limit=2, cursor=first["next_cursor"])
    assert [s["id"] for s in second["data"]] == ["sug-2", "sug-3"]
    last = _page(http, "/v1/memory/suggestions", limit=2, cursor=second["next_cursor"])
    assert ([s["id"] for s in last["data"]], last["has_more"], last["next_cursor"]) == (
        ["sug-4"],
        False,
        None,
    )


def test_deleting_a_page_of_facts_skips_none_of_the_next(http: httpx.Client) -> None:
    for n in range(5):
        assert http.post("/v1/memory", json={"text": f"Fact number {n}"}).status_code == 201
    first = _page(http, "/v1/memory", limit=2)
    for fact in first["data"]:
        assert http.delete(f"/v1/memory/{fact['id']}").status_code == 200
    second = _page(http, "/v1/memory", limit=2, cursor=first["next_cursor"])
    assert [f["text"] for f in second["data"]] == ["Fact number 2", "Fact number 3"]
    assert second["has_more"] is True


def test_a_bad_cursor_is_the_400_naming_it(http: httpx.Client) -> None:
    for path in ("/v1/memory", "/v1/memory/suggestions"):
        for bad in ("nope", "WyJhIl0", "Wy0xXQ"):  # text, ["a"], [-1]
            resp = http.get(path, params={"cursor": bad})
            assert resp.status_code == 400, (path, bad, resp.text)
            assert resp.json()["error"]["param"] == "cursor"
        resp = http.get(path, params={"cursor": "WzFd", "offset": 1})  # [1]
        assert (resp.status_code, resp.json()["error"]["param"]) == (400, "offset")


def test_a_cursor_of_one_list_is_the_400_naming_it_on_another(
    http: httpx.Client, db_dsn: str
) -> None:
    """A facts cursor holds a fact's id and a suggestions cursor an event's, numbers of two
    sequences: read as the other list's place, it began that list at an arbitrary row."""
    for n in range(3):
        assert http.post("/v1/memory", json={"text": f"Fact number {n}"}).status_code == 201
        suggest(db_dsn, f"s{n}", f"sug-{n}", [f"fact {n}"])
    facts = _page(http, "/v1/memory", limit=1)["next_cursor"]
    pending = _page(http, "/v1/memory/suggestions", limit=1)["next_cursor"]
    sessions = _page(http, "/v1/sessions", limit=1)["next_cursor"]
    assert all(isinstance(c, str) for c in (facts, pending, sessions))
    for path, cursor in (
        ("/v1/memory/suggestions", facts),
        ("/v1/memory", pending),
        ("/v1/memory", sessions),
        ("/v1/sessions", facts),
    ):
        resp = http.get(path, params={"cursor": cursor})
        assert resp.status_code == 400, (path, resp.text)
        assert resp.json()["error"]["param"] == "cursor"
