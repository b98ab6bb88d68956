"""The rows shown against what happens while they load: an eviction heard while a reload
of the window or of earlier rows is under way, and a reader who scrolls up while the view
follows the tail. Built through the API as test_console_rows_shown.py builds its session;
held responses (routes) order the reads and the events, so nothing here waits on time."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.ui.conftest import ROOMY, Page
from tests.integration.ui.test_console import inject, wait_for
from tests.integration.ui.test_console_events import evict_row
from tests.integration.ui.test_console_rows_shown import (
    SID,
    open_long,
    settled,
    step,
)

pytestmark = [pytest.mark.timeout(60), ROOMY]


def test_an_eviction_heard_while_the_window_reloads_updates_the_row_it_names(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """A `context.evicted` heard while a reload of the window is under way, one that read
    the rows before the eviction and places the window after rows added meanwhile: the next
    read goes from the row the event names, wherever the reload put it in the list."""
    sent: list[Any] = []
    page = open_long(console, console_proxy, fake_upstream, 0, sent)
    tool = page.locator("#message-list > li[data-role=tool]").nth(5)
    pos = int(tool.get_attribute("data-pos") or 0)
    call = tool.get_attribute("data-tool-call-id")
    held: dict[str, list[Any]] = {"session": [], "messages": []}
    state = {"hold": True}

    def on_session(route: Any) -> None:
        if state["hold"] and not held["session"]:
            held["session"].append(route)
        else:
            route.continue_()

    def on_messages(route: Any) -> None:
        answer = route.fetch()  # read now, answered when the test says
        if state["hold"]:
            held["messages"].append((route, answer))
        else:
            route.fulfill(response=answer)

    page.route(f"**/v1/sessions/{SID}", on_session)
    page.route(f"**/v1/sessions/{SID}/messages?*", on_messages)
    inject(db_dsn, SID, "context.trimmed", {"count": 0})  # a reload of the window
    wait_for(lambda: len(held["session"]) == 1, page)
    sent += [{"role": "user", "content": "go on"}]
    step(console_proxy, fake_upstream, sent, "went on")  # two rows the reload will place
    held["session"][0].continue_()
    wait_for(lambda: len(held["messages"]) == 1, page)  # read before the eviction
    heard_evicted(page, db_dsn, pos, str(call))
    state["hold"] = False
    route, answer = held["messages"].pop()
    route.fulfill(response=answer)
    page.get_by_test_id("message-list").get_by_text("went on").wait_for()
    settled(page)
    row = page.locator(f"#message-list > li[data-pos='{pos}']")
    wait_for(lambda: row.locator("[data-mark=evicted]").count() == 1, page)


def heard_evicted(page: Any, db_dsn: str, pos: int, call: str) -> None:
    """The row at `pos` cleared in place and its `context.evicted`, heard by the page."""
    evict_row(db_dsn, SID, pos)
    inject(db_dsn, SID, "context.evicted", {"count": 1, "handles": [f"{call}@{pos}"]})
    inject(db_dsn, SID, "context.compaction.started", {})  # the events come in order:
    page.get_by_test_id("status-line").get_by_text("Compacting").wait_for()  # both heard


def test_an_eviction_heard_while_earlier_rows_load_updates_the_one_it_names(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """A `context.evicted` naming a row before those shown, heard while "load earlier" reads
    the rows that hold it as they were before: once they are shown, that row is read again."""
    page = open_long(console, console_proxy, fake_upstream, 0)
    held: list[Any] = []

    def on_range(route: Any) -> None:  # the first read (load earlier's) now, answered
        if held:  # when the test says; the others as they come
            route.continue_()
        else:
            held.append((route, route.fetch()))

    page.route(f"**/v1/sessions/{SID}/messages?form=prompt&limit=*", on_range)
    page.get_by_test_id("load-earlier").click()
    wait_for(lambda: len(held) == 1, page)
    route, answer = held[0]
    tool = [r for r in answer.json()["data"] if r["role"] == "tool"][5]
    heard_evicted(page, db_dsn, tool["pos"], tool["tool_call_id"])
    route.fulfill(response=answer)
    row = page.locator(f"#message-list > li[data-pos='{tool['pos']}']")
    row.wait_for()
    settled(page)
    wait_for(lambda: row.locator("[data-mark=evicted]").count() == 1, page)


# the page's frames, run when the test says: what a frame would do is seen, not timed
FRAMES = """
window.framesHeld = [];
window.requestAnimationFrame = (fn) => window.framesHeld.push(fn);
window.runFrames = () => {
  for (let i = 0; i < 100 && window.framesHeld.length; i++) window.framesHeld.shift()();
};
"""


def top(page: Any) -> float:
    return float(page.evaluate("document.scrollingElement.scrollTop"))


def test_a_reader_who_scrolls_up_while_the_view_follows_the_tail_stays_where_they_went(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """The view follows the tail for a few frames after a load while the page's height
    changes (rows scrolled into sight take their own height): a reader who scrolls up
    meanwhile is not taken back down to the composer."""
    page = open_long(console, console_proxy, fake_upstream, 0)
    page.evaluate(FRAMES)
    inject(db_dsn, SID, "session.message.appended", {})  # a load, at the page's end
    wait_for(lambda: page.evaluate("window.framesHeld.length") > 0, page)
    settled(page)
    end = top(page)
    page.mouse.move(400, 300)
    page.mouse.wheel(0, -1500)
    wait_for(lambda: top(page) < end - 1000, page)
    seen = [-1.0]

    def still() -> bool:  # a smooth scroll, if any, has come to rest
        was, seen[0] = seen[0], top(page)
        return was == seen[0]

    wait_for(still, page)
    went = seen[0]
    page.evaluate("document.body.style.paddingBottom = '600px'")  # the height changes
    page.evaluate("window.runFrames()")
    assert abs(top(page) - went) < 2, (top(page), went, end)


def _following(page: Any, db_dsn: str) -> None:
    """A load at the page's end, its frames held: the view follows the tail from there."""
    page.evaluate(FRAMES)
    inject(db_dsn, SID, "session.message.appended", {})
    wait_for(lambda: page.evaluate("window.framesHeld.length") > 0, page)
    settled(page)


def test_a_reader_scrolled_up_by_no_wheel_or_key_stays_where_they_went(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """Scrolled up while the view follows the tail by what sends no wheel, touch or key event
    (the scrollbar dragged, find in page, a screen reader's cursor), the reader stays there:
    the view follows only a page still at its end."""
    page = open_long(console, console_proxy, fake_upstream, 0)
    _following(page, db_dsn)
    page.evaluate("document.scrollingElement.scrollTop = 0")
    page.evaluate("document.body.style.paddingBottom = '600px'")  # the height changes
    page.evaluate("window.runFrames()")
    assert top(page) < 2, top(page)


def test_typing_while_the_view_follows_the_tail_does_not_stop_it(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """A key typed in the composer scrolls nothing: the view, at its end, goes on following
    the tail as the page's height changes."""
    page = open_long(console, console_proxy, fake_upstream, 0)
    _following(page, db_dsn)
    page.get_by_test_id("composer-input").press("a")
    # the last row takes its height: the composer goes down, out of sight
    page.evaluate(
        "document.querySelector('#message-list > li:last-child').style.paddingBottom = '600px'"
    )
    page.evaluate("window.runFrames()")
    below = page.evaluate(
        "innerHeight - document.getElementById('composer').getBoundingClientRect().bottom"
    )
    assert abs(below) < 2, below  # scrolled down to it again
