"""The console's event stream past the happy path: a repeated handoff nudge updates its toast
instead of stacking another, a session that answers 404 is not polled forever, a stream
that fails reconnects with a growing pause, and a reset by another client shows at once."""

from __future__ import annotations

import concurrent.futures
import re
import time
from typing import Any

import asyncpg
import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.conftest import run_sync
from tests.integration.ui.conftest import TENANT, Page
from tests.integration.ui.settle import settled
from tests.integration.ui.test_console import (
    api,
    inject,
    sign_in,
    stream_live,
    tool_round,
    wait_for,
)
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)


def evict_row(db_dsn: str, sid: str, pos: int) -> None:
    """A result cleared in place, as eviction clears one, and no event for it."""

    async def go() -> None:
        conn = await asyncpg.connect(db_dsn)
        try:
            await conn.execute(
                "UPDATE messages SET evicted_at = now() WHERE tenant = $1 AND session_id = $2"
                " AND pos = $3 AND superseded_at IS NULL",
                TENANT,
                sid,
                pos,
            )
        finally:
            await conn.close()

    # on its own thread: sync Playwright keeps an event loop running on this one
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(run_sync, go()).result(timeout=10)


def events_requests(console: Page, sid: str) -> list[str]:
    return [u for u in console.urls if u.endswith(f"/v1/sessions/{sid}/events")]


def test_a_repeated_handoff_suggestion_updates_its_toast(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    started(console_proxy, "nudged")
    page = sign_in(console, "#/s/nudged")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    toasts = page.locator("[data-testid=toast][data-kind=handoff]")
    inject(db_dsn, "nudged", "context.handoff_suggested", {"fraction": 0.91})
    toasts.filter(has_text="91%").wait_for()
    inject(db_dsn, "nudged", "context.handoff_suggested", {"fraction": 0.95})
    toasts.filter(has_text="95%").wait_for()
    assert toasts.count() == 1
    page.reload()  # the stream replays both: still one toast, saying the latest
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    toasts.filter(has_text="95%").wait_for()
    stream_live(page)  # the replay is in: a second toast would be there
    assert toasts.count() == 1


def test_a_deleted_session_is_not_polled_and_is_followed_once_started_again(
    console: Page, console_proxy: ProxyServer
) -> None:
    started(console_proxy, "gone")
    with api(console_proxy) as h:
        assert h.delete("/v1/sessions/gone").status_code in (200, 204)
    console.page.clock.install()
    page = sign_in(console, "#/s/gone")
    wait_for(lambda: len(events_requests(console, "gone")) == 1, page)
    for _ in range(5):  # it asked every 2 s, for as long as the page stayed open
        page.clock.run_for(2_000)
        settled(page, frames=False)  # a try those 2 s armed is under way
    assert len(events_requests(console, "gone")) == 1
    meta = page.get_by_text("no session with this id")
    meta.wait_for()
    assert page.get_by_test_id("toast").count() == 0  # not found is no error
    # the composer's first message starts it again: the page follows its events again
    with page.expect_response(
        lambda r: r.url.endswith("/v1/sessions/gone/events") and r.status == 200
    ):
        page.get_by_test_id("composer-input").fill("Hello again")
        page.get_by_test_id("composer-send").click()
    meta.wait_for(state="detached")


def test_a_session_deleted_elsewhere_shows_as_not_found_with_none_of_its_data(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """Its stream ends, and the page looks as it does for an id never started: no rows,
    usage or summary, and none of what the page showed of it (its own last answer, the
    status line, a memory prompt or a handoff toast about it)."""
    started(console_proxy, "doomed")
    page = sign_in(console, "#/s/doomed")
    rows = page.get_by_test_id("message-list").locator("li")
    rows.get_by_text("hi").wait_for()
    answer = page.get_by_test_id("assistant-message")
    page.get_by_test_id("composer-input").fill("Hello")
    page.get_by_test_id("composer-send").click()
    page.locator("[data-testid=assistant-message][data-state=done]").wait_for()
    assert answer.inner_text() != ""
    status = page.get_by_test_id("status-line")
    inject(
        db_dsn, "doomed", "context.compaction.completed", {"tokens_before": 9, "tokens_after": 3}
    )
    status.filter(has_text="Compacted").wait_for()
    prompt = page.get_by_test_id("memory-prompt")
    inject(db_dsn, "doomed", "memory.suggestion", {"suggestion_id": "s-1", "facts": ["x is y"]})
    prompt.filter(has_text="x is y").wait_for()
    inject(db_dsn, "doomed", "context.handoff_suggested", {"fraction": 0.93})
    page.get_by_test_id("toast").filter(has_text="93%").wait_for()
    usage = page.get_by_test_id("usage-text")
    assert "tokens" in usage.inner_text()

    with api(console_proxy) as h:  # another client deletes it while the page shows it
        assert h.delete("/v1/sessions/doomed").status_code in (200, 204)
    page.get_by_text("no session with this id").wait_for()
    wait_for(lambda: rows.count() == 0, page)
    assert usage.inner_text() == "No usage yet: the first message starts the session."
    assert page.get_by_test_id("summary").inner_text().strip() == "No summary yet."
    assert (answer.inner_text(), status.inner_text()) == ("", "")
    assert prompt.is_hidden()
    assert page.get_by_test_id("toast").count() == 0  # not found is no error


def test_a_failing_stream_reconnects_with_a_growing_pause(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A 503, then a stream that ends before it says it is live (``: live``, after the
    replay): neither resets the pause, and only the third, live, says the stream is back."""
    started(console_proxy, "flaky")
    calls: list[float] = []

    def events(route: Any) -> None:
        calls.append(time.monotonic())
        if len(calls) == 1:
            route.fulfill(status=503, json={"error": {"message": "down for a moment"}})
        elif len(calls) == 2:
            route.fulfill(status=200, content_type="text/event-stream", body=": ping\n\n")
        else:
            route.continue_()

    console.page.route("**/v1/sessions/flaky/events", events)
    page = sign_in(console, "#/s/flaky")
    page.get_by_test_id("toast").filter(has_text="Live updates are back").wait_for()
    assert len(calls) == 3
    first, second = calls[1] - calls[0], calls[2] - calls[1]
    assert first >= 0.9 and second >= 1.9, (first, second)  # 1 s, then 2 s
    errors = page.locator("[data-testid=toast][data-kind=error]")
    assert errors.count() == 0  # said once, and gone when the stream came back
    assert page.get_by_test_id("toast").count() == 1


def test_a_reset_elsewhere_empties_the_open_view(console: Page, console_proxy: ProxyServer) -> None:
    started(console_proxy, "wiped")
    page = sign_in(console, "#/s/wiped")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    with api(console_proxy) as h:  # another client (the CLI, a script) resets it
        assert h.post("/v1/sessions/wiped/reset").status_code == 200
    page.locator("#session-meta").filter(has_text="0 messages").wait_for()
    assert page.locator("[data-testid=message]").count() == 0
    assert page.get_by_test_id("toast").count() == 0


SEEN = """() => {
  window.seen = [];
  const meta = document.getElementById("session-meta");
  new MutationObserver(() => window.seen.push(
    [meta.textContent, document.querySelectorAll("[data-testid=message]").length],
  )).observe(meta, { childList: true, characterData: true, subtree: true });
}"""


def test_the_count_shown_is_never_newer_than_the_rows_beside_it(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """A load reads the session before its rows. Here the session's read is held until a
    reset elsewhere is done, and a read of the rows sent meanwhile is answered as it was
    before the reset: the view never shows "0 messages" beside the rows the reset removed
    (each change of the count is recorded with the rows shown with it)."""
    started(console_proxy, "held")
    page = sign_in(console, "#/s/held")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    page.evaluate(SEEN)
    held: list[Any] = []
    done: list[bool] = []

    def reset() -> None:
        with api(console_proxy) as h:  # another client resets it
            assert h.post("/v1/sessions/held/reset").status_code == 200
        done.append(True)
        for route in held:
            route.continue_()

    def on_session(route: Any) -> None:
        if done:
            route.continue_()
        else:
            held.append(route)

    def on_rows(route: Any) -> None:
        if done:
            route.continue_()
            return
        before = route.fetch()
        reset()
        route.fulfill(response=before)

    page.route(re.compile(r"/v1/sessions/held$"), on_session)
    page.route(re.compile(r"/v1/sessions/held/messages\?"), on_rows)
    inject(db_dsn, "held", "session.message.appended", {})  # the view loads the rows after
    wait_for(lambda: bool(held or done), page)
    if not done:  # the session's read came first and waits: the reset happens now
        reset()
    page.locator("#session-meta").filter(has_text="0 messages").wait_for()
    wait_for(lambda: page.locator("[data-testid=message]").count() == 0, page)
    seen = page.evaluate("window.seen")
    assert any(" 0 messages" in text for text, _ in seen), seen
    assert all(rows == 0 for text, rows in seen if " 0 messages" in text), seen


def test_a_silent_stream_is_given_up_and_what_changed_meanwhile_shows(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """The proxy pings the stream every 15 s; one that says nothing for 45 s (a connection
    gone without a word: a laptop that slept) is dropped and opened again, and the rows are
    read again then: a result evicted meanwhile, whose transient event no replay brings,
    shows evicted. The page's clock is run forward: the proxy's pings keep real time."""
    history = [m for i in range(2) for m in tool_round(i, 400)]
    with api(console_proxy) as h:
        resp = h.post("/s/asleep/v1/chat/completions", json={"model": "m", "messages": history})
        assert resp.status_code == 200, resp.text
    console.page.clock.install()
    page = sign_in(console, "#/s/asleep")
    row = page.locator("[data-testid=message][data-pos='2']")  # the first round's result
    row.wait_for()
    assert row.locator("[data-mark=evicted]").count() == 0
    wait_for(lambda: len(events_requests(console, "asleep")) == 1, page)
    evict_row(db_dsn, "asleep", 2)
    page.clock.run_for(30_000)
    page.wait_for_timeout(200)
    assert len(events_requests(console, "asleep")) == 1  # not yet: a ping may still come
    page.clock.run_for(16_000)  # 46 s of silence, then the 1 s pause before the next try
    for _ in range(3):  # a real ping (the proxy keeps real time) restarts the silence: run on
        page.wait_for_timeout(300)
        if len(events_requests(console, "asleep")) == 2:
            break
        page.clock.run_for(47_000)
    wait_for(lambda: len(events_requests(console, "asleep")) == 2, page)
    row.locator("[data-mark=evicted]").wait_for()
    page.get_by_test_id("toast").filter(has_text="Live updates are back").wait_for()


def test_an_eviction_between_the_first_read_and_the_stream_shows(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The view reads its rows and opens its stream side by side: a request evicting in
    between sends its transient ``context.evicted`` to no one. Its turn's ``context.usage``
    (persisted: replayed by the stream, or live) names the eviction's total, larger than
    the read saw, and the view reads its rows again. The stream is held here until the
    evicting request has ended, the widest such gap."""
    history = [m for i in range(2) for m in tool_round(i, 1300)]
    fake_upstream.script(reply("Read both.", usage=(1900, 4)))  # the next one evicts
    with api(console_proxy) as h:
        resp = h.post("/s/gap/v1/chat/completions", json={"model": "m", "messages": history})
        assert resp.status_code == 200, resp.text
        history.append(resp.json()["choices"][0]["message"])
        assert not h.get("/v1/sessions/gap/messages").json()["data"][2]["evicted"]
    held: list[Any] = []

    def hold(route: Any) -> None:
        held.append(route)

    console.page.route("**/v1/sessions/gap/events", hold)
    page = sign_in(console, "#/s/gap")
    row = page.locator("[data-testid=message][data-pos='2']")  # the first round's result
    row.wait_for()
    wait_for(lambda: len(held) == 1, page)
    with api(console_proxy) as h:
        more = [*history, *tool_round(2, 100)]
        resp = h.post("/s/gap/v1/chat/completions", json={"model": "m", "messages": more})
        assert resp.status_code == 200, resp.text
        rows = h.get("/v1/sessions/gap/messages").json()["data"]
    assert rows[2]["evicted"], "the second request evicts the first result"
    assert row.locator("[data-mark=evicted]").count() == 0  # as read before it
    held[0].continue_()
    row.locator("[data-mark=evicted]").wait_for()
    assert page.get_by_test_id("toast").count() == 0


def test_the_list_is_busy_while_a_load_of_its_rows_runs_or_waits(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """The message list says ``aria-busy`` while a load runs and while one an event asked
    for meanwhile waits its turn, and no longer once the last ended."""
    started(console_proxy, "busy")
    page = sign_in(console, "#/s/busy")
    page.get_by_test_id("message-list").get_by_text("hi", exact=True).wait_for()
    idle = page.locator("[data-testid=message-list]:not([aria-busy])")
    busy = page.locator("[data-testid=message-list][aria-busy=true]")
    idle.wait_for()
    held: list[Any] = []  # the loads' row reads, answered when the test says
    page.route("**/v1/sessions/busy/messages?*", lambda route: held.append(route))
    inject(db_dsn, "busy", "context.usage", {})
    wait_for(lambda: len(held) == 1, page)
    assert busy.count() == 1
    inject(db_dsn, "busy", "context.usage", {})  # a load asked for while one runs
    inject(db_dsn, "busy", "context.compaction.started", {})  # after it: it was heard
    page.get_by_test_id("status-line").filter(has_text="Compacting").wait_for()
    held[0].continue_()
    wait_for(lambda: len(held) == 2, page)
    assert busy.count() == 1
    held[1].continue_()
    idle.wait_for()


def test_a_load_that_fails_after_its_view_closed_leaves_the_open_view_alone(
    console: Page, console_proxy: ProxyServer
) -> None:
    """Opening another session closes the view but not its reads: a load still under way
    ends in the closed view. One that fails then (a 404: the session deleted meanwhile)
    neither empties the open view's rows nor says its session is missing."""
    started(console_proxy, "first")
    started(console_proxy, "second")
    held: list[Any] = []

    def hold(route: Any) -> None:
        held.append(route)

    console.page.route(re.compile(r"/v1/sessions/first$"), hold)
    page = sign_in(console, "#/s/first")
    wait_for(lambda: bool(held), page)
    page.evaluate("location.hash = '#/s/second'")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    page.locator("#session-meta").filter(has_text="messages").wait_for()
    with page.expect_request_finished(lambda r: r.url.endswith("/v1/sessions/first")):
        held[0].fulfill(
            status=404,
            content_type="application/json",
            body='{"error": {"message": "no session", "type": "not_found"}}',
        )
    settled(page)  # the page has read that answer, and drawn what it made of it
    assert "no session with this id" not in page.locator("#session-meta").inner_text()
    assert page.get_by_test_id("message-list").get_by_text("hi").count() == 1


def test_a_completed_compaction_the_sweep_wrote_with_nulls_reads_compacted(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """A compaction cut after it stored its summary is closed as completed with what only
    its run knew (``tokens_after`` among them) null: the status says it compacted, with no
    token count it does not have ("3,000 → 0" would claim a prompt of none)."""
    started(console_proxy, "swept")
    page = sign_in(console, "#/s/swept")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    nulls = ("folded_messages", "tokens_after", "identifiers_kept", "identifiers_added")
    data = {"trigger": "soft", "summary_version": 1, "tokens_before": 3000, "started_id": 1}
    inject(db_dsn, "swept", "context.compaction.completed", {**data, **dict.fromkeys(nulls)})
    status = page.get_by_test_id("status-line")
    status.filter(has_text="Compacted").wait_for()
    assert status.inner_text().strip() == "Compacted."
