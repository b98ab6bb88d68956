"""A history's live pages stay by ``?offset=`` where the session and memory lists page by
cursor (README, Decisions): the live rows hold positions 0, 1, 2, … one each, so the page at
offset N starts at position N, which appends and a divergent resend's replacements never
move. With ``include_superseded`` the order runs over every generation of a position, and a
resend between two pages does put rows before a later page's offset."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.api.conftest import replied


def _turn(http: httpx.Client, messages: list[dict[str, Any]]) -> None:
    resp = http.post(
        "/v1/chat/completions",
        headers={"X-Session-Id": "hist"},
        json={"model": "m", "messages": messages},
    )
    assert resp.status_code == 200, resp.text
    replied(http, "hist")


def _page(http: httpx.Client, offset: int, **params: Any) -> list[dict[str, Any]]:
    resp = http.get("/v1/sessions/hist/messages", params={"offset": offset, **params})
    assert resp.status_code == 200, resp.text
    data: list[dict[str, Any]] = resp.json()["data"]
    return data


def test_a_live_page_at_offset_n_starts_at_position_n(http: httpx.Client) -> None:
    user = [{"role": "user", "content": "one"}]
    _turn(http, user)
    first = _page(http, 0, limit=1)
    reply = _page(http, 1)[0]["message"]
    _turn(http, [*user, reply, {"role": "user", "content": "two"}])  # appended: 4 rows
    assert [m["pos"] for m in _page(http, 0)] == [0, 1, 2, 3]
    # a divergent resend from position 1 supersedes 1..3 and stores its rows from 1 again
    other = {"role": "assistant", "content": "other"}
    _turn(http, [*user, other, {"role": "user", "content": "three"}])
    live = _page(http, 0)
    assert [m["pos"] for m in live] == list(range(len(live)))
    assert _page(http, 0, limit=1) == first  # the first page read before it: still itself
    for n in range(len(live)):
        assert [m["pos"] for m in _page(http, n, limit=1)] == [n]
    # every generation: position 1's replacement comes before the old position 2, so an
    # offset past it read before the resend would now start one row back
    every = _page(http, 0, include_superseded="true")
    assert [(m["pos"], bool(m["superseded"])) for m in every][1:4] == [
        (1, True),
        (1, False),
        (2, True),
    ]
