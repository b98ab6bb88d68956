"""``GET /v1/sessions`` pages by an opaque cursor as well as by offset. The list runs latest
activity first, so a session created or used between two offset pages moves every row after
it one place down, and the next offset page shows one of the last page's rows again. A
``next_cursor`` names the place after the page's last row, not a count of rows, so the next
page starts after that row whatever came to the front since."""

from __future__ import annotations

import base64
import json
from typing import Any

import asyncpg
import httpx

from tests.integration.api.sessions_helpers import (
    chat,
    config_path,  # noqa: F401  (the module's config)
    settled,
    user,
)


def _page(http: httpx.Client, **params: Any) -> dict[str, Any]:
    resp = http.get("/v1/sessions", params=params)
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def _ids(body: dict[str, Any]) -> list[str]:
    return [row["id"] for row in body["data"]]


def _new(http: httpx.Client, sid: str) -> None:
    chat(http, [user(f"hi {sid}")], sid=sid)
    settled(http, sid, 2)


def test_a_cursor_page_neither_repeats_nor_skips_for_sessions_made_between(
    http: httpx.Client,
) -> None:
    for sid in ("a", "b", "c"):
        _new(http, sid)
    first = _page(http, limit=2)
    assert (_ids(first), first["has_more"]) == (["c", "b"], True)
    assert isinstance(first["next_cursor"], str)
    _new(http, "d")  # to the front: an offset page now starts one row earlier
    assert _ids(_page(http, limit=2, offset=2)) == ["b", "a"]
    after = _page(http, limit=2, cursor=first["next_cursor"])
    assert (_ids(after), after["has_more"], after["next_cursor"]) == (["a"], False, None)


def test_a_session_used_after_its_page_is_not_shown_again(http: httpx.Client) -> None:
    for sid in ("a", "b", "c"):
        _new(http, sid)
    first = _page(http, limit=1)
    assert _ids(first) == ["c"]
    chat(http, [user("hi c"), {"role": "assistant", "content": "ok"}, user("more")], sid="c")
    settled(http, "c", 4)
    second = _page(http, limit=1, cursor=first["next_cursor"])
    third = _page(http, limit=1, cursor=second["next_cursor"])
    assert (_ids(second), _ids(third), third["next_cursor"]) == (["b"], ["a"], None)


def test_a_cursor_keeps_the_filter_and_a_bad_one_is_the_400_naming_it(
    http: httpx.Client,
) -> None:
    for sid in ("x-1", "y-1", "x-2", "x-3"):
        _new(http, sid)
    first = _page(http, limit=1, q="x-")
    rest = _page(http, limit=5, q="x-", cursor=first["next_cursor"])
    assert (_ids(first), _ids(rest)) == (["x-3"], ["x-2", "x-1"])
    for bad in ("nope", "e30", "%%%", "a" * 2000):
        resp = http.get("/v1/sessions", params={"cursor": bad})
        assert resp.status_code == 400, (bad, resp.text)
        assert resp.json()["error"]["param"] == "cursor", resp.text
    both = http.get("/v1/sessions", params={"cursor": first["next_cursor"], "offset": 1})
    assert both.status_code == 400, both.text
    assert both.json()["error"]["param"] == "offset"
    assert _page(http, limit=2, cursor="")["data"] == _page(http, limit=2)["data"]


def test_a_cursor_the_database_cannot_take_is_the_400_naming_it(http: httpx.Client) -> None:
    """A cursor's time past year 9999 in UTC, or an id with a lone surrogate, is text no
    page gave; the driver refused each with a 500."""
    _new(http, "a")
    for place in (["9999-12-31T23:59:59-14:00", "a"], ["2026-01-01T00:00:00+00:00", "\ud800"]):
        raw = base64.urlsafe_b64encode(json.dumps(place).encode()).decode()
        resp = http.get("/v1/sessions", params={"cursor": raw})
        assert resp.status_code == 400, (place, resp.text)
        assert resp.json()["error"]["param"] == "cursor", resp.text


async def test_sessions_tied_on_activity_to_the_microsecond_page_by_id(
    http: httpx.Client, admin: asyncpg.Connection
) -> None:
    """Rows of one ``updated_at`` are ordered by id, and a cursor inside the tie goes on
    from its row: none twice, none missed, a microsecond apart counted as apart."""
    for sid in ("t-3", "t-1", "t-4", "t-2", "t-0"):
        _new(http, sid)
    await admin.execute(
        "UPDATE sessions SET updated_at = CASE WHEN id = 't-0'"
        " THEN timestamptz '2026-01-01 00:00:00.123457+00'"
        " ELSE timestamptz '2026-01-01 02:00:00.123456+02' END"
    )
    seen: list[str] = []
    page = _page(http, limit=2)
    while True:
        seen += _ids(page)
        if page["next_cursor"] is None:
            break
        page = _page(http, limit=2, cursor=page["next_cursor"])
    assert seen == ["t-0", "t-1", "t-2", "t-3", "t-4"]


def test_no_answer_is_conditional(http: httpx.Client) -> None:
    """No ETag or Last-Modified is given and a conditional GET is answered whole (README,
    Decisions, "No conditional GETs"): a 304 would need the rows read to know it."""
    _new(http, "a")
    for path in ("/v1/sessions", "/v1/sessions/a", "/v1/sessions/a/messages"):
        resp = http.get(path, headers={"If-None-Match": "*", "If-Modified-Since": _FUTURE})
        assert resp.status_code == 200 and resp.json(), path
        assert "etag" not in resp.headers and "last-modified" not in resp.headers, path


_FUTURE = "Fri, 01 Jan 2100 00:00:00 GMT"


def test_a_cursor_nested_past_the_parsers_depth_is_the_400_naming_it(
    http: httpx.Client,
) -> None:
    """A cursor of the longest length taken that decodes to arrays nested hundreds deep ran
    out of the interpreter's recursion depth in the JSON parser, deep in a request's stack:
    a 500 (and a traceback in the log) for text no page gave."""
    nested = base64.urlsafe_b64encode(b"[" * 750).decode()
    assert len(nested) == 1000  # the most a cursor parameter takes
    for path in ("/v1/sessions", "/v1/memory", "/v1/memory/suggestions"):
        resp = http.get(path, params={"cursor": nested})
        assert resp.status_code == 400, (path, resp.text)
        assert resp.json()["error"]["param"] == "cursor", resp.text
