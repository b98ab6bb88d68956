"""History reconciliation by hash chain (DESIGN §4), end to end: a history that diverges.

An edited or regenerated history supersedes the stored tail, which is kept and shown on
request; a new opening supersedes everything; a regenerate that fails leaves the head on the
live history.
"""

from __future__ import annotations

import json

import httpx

from tests.fakes.replies import error, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.reconcile_helpers import (
    MODEL,
    all_messages,
    history,
    post,
    session_view,
    settled,
    user,
)
from tests.integration.conftest import column


def test_edit_supersedes_the_tail_from_the_divergence_point(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("a1"), reply("a2"), reply("a2 again"))
    a1 = post(http, "s", [user("u1")])["choices"][0]["message"]
    post(http, "s", [user("u1"), a1, user("u2")])
    settled(http, "s", 4)
    post(http, "s", [user("u1"), a1, user("u2 edited")])
    view = settled(http, "s", 4)
    assert view["superseded_count"] == 2
    live = http.get("/v1/sessions/s/messages").json()["data"]
    assert [r["message"]["content"] for r in live] == ["u1", "a1", "u2 edited", "a2 again"]
    everything = all_messages(http, "s")
    assert [(r["pos"], r["message"]["content"], r["superseded"]) for r in everything] == [
        (0, "u1", False),
        (1, "a1", False),
        (2, "u2", True),
        (2, "u2 edited", False),
        (3, "a2", True),
        (3, "a2 again", False),
    ]
    # the provider saw the edited history, not the superseded one
    assert fake_upstream.bodies()[-1]["messages"][-1] == user("u2 edited")


def test_regenerate_supersedes_the_stored_reply(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("first try"), reply("second try"))
    post(http, "regen", [user("q")])
    settled(http, "regen", 2)
    post(http, "regen", [user("q")])
    assert settled(http, "regen", 2)["superseded_count"] == 1
    rows = all_messages(http, "regen")
    assert [(r["message"]["content"], r["superseded"]) for r in rows] == [
        ("q", False),
        ("first try", True),
        ("second try", False),
    ]


def test_new_opening_supersedes_everything(http: httpx.Client) -> None:
    base = history(6)
    post(http, "fresh", base)
    settled(http, "fresh", 7)
    post(http, "fresh", [user("a different opening")])
    assert settled(http, "fresh", 2)["superseded_count"] == 7
    assert len(all_messages(http, "fresh")) == 9


def test_a_failed_regenerate_leaves_the_head_on_the_live_history(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("first"), error(500), reply("after"))
    first = post(http, "rg", [user("q")])["choices"][0]["message"]
    settled(http, "rg", 2)
    # regenerate: the stored reply is superseded, but the provider fails, so nothing is added
    resp = http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [user("q")]},
        headers={"x-session-id": "rg"},
    )
    assert resp.status_code == 500
    assert session_view(http, "rg")["message_count"] == 1
    # the agent goes on with the reply it already had: it must reach the provider again
    post(http, "rg", [user("q"), first, user("u2")])
    assert [m["content"] for m in fake_upstream.bodies()[-1]["messages"]] == ["q", "first", "u2"]
    settled(http, "rg", 4)
    live = http.get("/v1/sessions/rg/messages").json()["data"]
    assert [r["message"]["content"] for r in live] == ["q", "first", "u2", "after"]


def test_a_history_cut_back_says_what_it_superseded(
    http: httpx.Client, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """A retried request, or a client that rolls back to an earlier question, sends a prefix
    of the stored history: nothing of it is new, but the stored tail is superseded. Its
    ``session.message.appended`` says so (``count`` 0), as an edit's does; the reply's own
    said ``superseded`` 0, and nothing else told a watcher the tail was gone."""
    base = [user("q1"), {"role": "assistant", "content": "ok"}, user("q2")]
    post(http, "cut-back", base)
    settled(http, "cut-back", 4)
    post(http, "cut-back", base[:1])
    settled(http, "cut-back", 2)
    sql = (
        "SELECT data FROM events WHERE session_id = 'cut-back'"
        " AND name = 'session.message.appended' ORDER BY id"
    )
    appended = [json.loads(d) for d in column(db_dsn, sql)]
    assert [(e["from_pos"], e["count"], e["superseded"]) for e in appended[-2:]] == [
        (1, 0, 3),
        (1, 1, 0),
    ]
