"""The console as an operator uses it, past the happy path: memory suggestions replayed when
a session opens, a session not started yet, ids the proxy cannot take, a narrow window.

Each test fails on the console before its fix; the ``console`` fixture checks that the page
raised no error and asked no host but the proxy.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.settle import settled
from tests.integration.ui.test_console import api, inject, sign_in, tool_round, wait_for

pytestmark = pytest.mark.timeout(60)


def started(proxy: ProxyServer, session_id: str) -> None:
    """One turn on ``session_id``, returned once its reply is stored: a non-streamed reply
    and its usage are stored just after the response is sent (README, "Timing of writes"),
    so a session API call made the instant it arrives may not see them yet."""
    with api(proxy) as h:
        resp = h.post(
            f"/s/{session_id}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert resp.status_code == 200, resp.text
        deadline = time.monotonic() + 10
        while h.get(f"/v1/sessions/{session_id}").json()["last_estimated_tokens"] is None:
            assert time.monotonic() < deadline, "the turn's reply was never stored"
            time.sleep(0.02)


def spills_over(page: Any) -> bool:
    return bool(
        page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth")
    )


def test_answered_suggestions_are_not_asked_again_and_waiting_ones_come_in_turn(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    started(console_proxy, "recall")
    inject(db_dsn, "recall", "memory.suggestion", {"suggestion_id": "s-old", "facts": ["A"]})
    inject(db_dsn, "recall", "memory.suggestion", {"suggestion_id": "s-new", "facts": ["B"]})
    page = sign_in(console, "#/s/recall")
    prompt = page.get_by_test_id("memory-prompt")
    # both replayed when the stream opens: the oldest is asked first, and says one more waits
    prompt.filter(has_text="1 of 2 waiting").wait_for()
    assert "A" in prompt.locator("li").all_inner_texts()
    page.get_by_test_id("memory-dismiss").click()
    prompt.locator("li", has_text="B").wait_for()  # the other one, not nothing
    page.get_by_test_id("memory-save").click()
    prompt.wait_for(state="hidden")
    with api(console_proxy) as h:
        assert h.get("/v1/memory/suggestions").json()["data"] == []
        assert [f["text"] for f in h.get("/v1/memory").json()["data"]] == ["B"]
    # reopened: the stream replays both events, but both are answered, so nothing is asked
    page.reload()
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    # a suggestion after them is asked alone: were either asked again, it would be first
    inject(db_dsn, "recall", "memory.suggestion", {"suggestion_id": "s-next", "facts": ["C"]})
    prompt.locator("li", has_text="C").wait_for()
    assert prompt.locator("li").all_inner_texts() == ["C"]
    assert "waiting" not in prompt.inner_text()
    assert page.get_by_test_id("toast").count() == 0


def test_a_session_not_started_shows_no_usage_rather_than_a_limit_of_one(
    console: Page, console_proxy: ProxyServer
) -> None:
    page = sign_in(console, "#/s/not-yet")
    text = page.get_by_test_id("usage-text")
    text.filter(has_text="No usage yet").wait_for()
    assert "/ 1 tokens" not in text.inner_text()


def test_nothing_spills_out_of_its_column_or_the_window(
    console: Page, console_proxy: ProxyServer
) -> None:
    started(console_proxy, "a-session-with-a-rather-long-id-for-a-narrow-window")
    page = sign_in(console, "#/s/a-session-with-a-rather-long-id-for-a-narrow-window")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    model = page.get_by_test_id("composer-model").bounding_box()
    column = page.locator(".col-main").bounding_box()
    assert model and column
    assert model["x"] + model["width"] <= column["x"] + column["width"] + 1  # not under the panel
    page.set_viewport_size({"width": 390, "height": 800})
    settled(page)  # laid out and drawn at the new width
    assert not spills_over(page)
    page.goto(f"{console.origin}/ui#/")
    page.get_by_test_id("session-row").first.wait_for()
    assert not spills_over(page)  # the table scrolls inside its box, not the page


def test_an_id_the_proxy_cannot_take_is_said_not_shown_as_a_new_session(
    console: Page, console_proxy: ProxyServer
) -> None:
    page = sign_in(console)
    page.get_by_test_id("session-list").wait_for(state="attached")
    session_calls: list[str] = []
    page.on("request", lambda r: session_calls.append(r.url) if "/v1/sessions/" in r.url else None)
    page.goto(f"{console.origin}/ui#/s/bad%20id%2Fx")
    toast = page.get_by_test_id("toast").filter(has_text="is not a session id")
    toast.wait_for()
    assert page.get_by_test_id("session-filter").is_visible()  # back on the list
    page.get_by_test_id("new-session-id").fill("a/b")
    page.get_by_test_id("new-session-open").click()
    wait_for(lambda: toast.count() == 2, page)
    page.goto(f"{console.origin}/ui#/s/100%")  # a stray "%" is no URI escape: no page error
    wait_for(lambda: toast.count() == 3, page)
    assert session_calls == []


def test_long_lists_are_read_page_by_page_not_cut_at_one_answer(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A session's messages past one answer's cap (10000): the page reads on, so the
    composer resends the whole history (the sessions list reads a page at a time:
    ``test_console_session_list``). The proxy's answers are stood in for here, as storing
    10001 messages would take long."""
    page = sign_in(console)
    page.get_by_test_id("session-list").wait_for(state="attached")
    asked: list[str] = []

    def paged(total: int, row: Any) -> Any:
        def fulfil(route: Any) -> None:
            url = httpx.URL(route.request.url)
            asked.append(f"{url.path}?{url.query.decode()}")
            offset, limit = int(url.params.get("offset", 0)), int(url.params["limit"])
            data = [row(i) for i in range(offset, min(total, offset + limit))]
            more = offset + limit < total
            route.fulfill(json={"object": "list", "data": data, "has_more": more})

        return fulfil

    message = lambda i: {"pos": i, "role": "user", "message": {"role": "user", "content": "x"}}  # noqa: E731
    page.route("**/v1/sessions/long/messages?*", paged(10_005, message))
    count = page.evaluate(
        "import('/ui/static/api.js').then((m) => m.api.messages('long', 'sent'))"
        ".then((out) => out.data.length)"
    )
    assert count == 10_005
    assert asked == [
        "/v1/sessions/long/messages?form=sent&limit=10000&offset=0",
        "/v1/sessions/long/messages?form=sent&limit=10000&offset=10000",
    ]
    # a full page the list says is its last (has_more false) is not followed by an empty one
    asked.clear()
    page.route("**/v1/sessions/full/messages?*", paged(10_000, message))
    count = page.evaluate(
        "import('/ui/static/api.js').then((m) => m.api.messages('full', 'sent'))"
        ".then((out) => out.data.length)"
    )
    assert count == 10_000
    assert asked == ["/v1/sessions/full/messages?form=sent&limit=10000&offset=0"]


def test_an_empty_list_says_why(console: Page, console_proxy: ProxyServer) -> None:
    page = sign_in(console)
    empty = page.locator("#list-empty")
    empty.filter(has_text="No sessions yet").wait_for()
    started(console_proxy, "only-one")
    page.reload()
    page.get_by_test_id("session-row").first.wait_for()
    assert empty.is_hidden()
    page.get_by_test_id("session-filter").fill("zzz")  # a filter that matches nothing
    empty.filter(has_text='No session matches "zzz"').wait_for()
    assert page.get_by_test_id("session-row").count() == 0


def test_a_lost_event_stream_warns_once_and_the_warning_goes_when_it_is_back(
    console: Page, console_proxy: ProxyServer
) -> None:
    started(console_proxy, "flaky")
    tries = {"n": 0}

    def events(route: Any) -> None:  # the first stream ends at once, the next fails
        tries["n"] += 1
        if tries["n"] == 1:
            route.fulfill(status=200, headers={"content-type": "text/event-stream"}, body="")
        else:
            route.abort()

    console.page.route("**/v1/sessions/flaky/events", events)
    page = sign_in(console, "#/s/flaky")
    lost = page.get_by_test_id("toast").filter(has_text="live updates stopped")
    lost.wait_for()
    page.unroute("**/v1/sessions/flaky/events")  # the proxy is back
    page.get_by_test_id("toast").filter(has_text="Live updates are back").wait_for()
    assert lost.count() == 0  # no longer says it is reconnecting


def test_the_keyboard_reaches_the_composer_past_a_long_list(
    console: Page, console_proxy: ProxyServer
) -> None:
    """Every long result's text is a scrollable box the keyboard stops at, so the composer
    after the list is hundreds of Tab presses away: the first stops of the session view
    offer a way there, out of sight until it has the focus."""
    history = [m for i in range(12) for m in tool_round(i, 1400)]
    with api(console_proxy) as h:
        resp = h.post("/s/keyed/v1/chat/completions", json={"model": "m", "messages": history})
        assert resp.status_code == 200, resp.text
    page = sign_in(console, "#/s/keyed")
    page.locator("[data-testid=message][data-role=tool]").first.wait_for()
    page.reload()  # the page opened afresh (signed in): the keyboard starts at its heading
    page.locator("[data-testid=message][data-role=tool]").first.wait_for()
    skip = page.get_by_test_id("skip-to-composer")
    assert not skip.is_visible() or skip.bounding_box()["x"] < 0  # type: ignore[index]
    focused = lambda: page.evaluate("document.activeElement.dataset.testid || ''")  # noqa: E731
    for _ in range(6):
        page.keyboard.press("Tab")
        if focused() == "skip-to-composer":
            break
    assert focused() == "skip-to-composer"
    assert skip.bounding_box()["x"] >= 0  # type: ignore[index]
    page.keyboard.press("Enter")
    assert focused() == "composer-input"
    page.keyboard.type("typed without the mouse")
    assert page.get_by_test_id("composer-input").input_value() == "typed without the mouse"
