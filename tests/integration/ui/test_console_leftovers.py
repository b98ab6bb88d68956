"""What a session view leaves behind: the raw outputs it paged back are forgotten when its
session is gone (deleted elsewhere, or reset from the page), so a session started again under
the same id never shows the old one's output, nor does a result that replaced the one paged
back at its position, even while that one's read is on its way; the handoff toast goes with
the view; "load earlier" names the rows a press adds."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.api.conftest import ProxyServer, replied
from tests.integration.ui.conftest import Page
from tests.integration.ui.settle import settled
from tests.integration.ui.test_console import api, inject, sign_in, tool_round, wait_for
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)


def _post(proxy: ProxyServer, session_id: str, messages: list[dict[str, Any]]) -> None:
    with api(proxy) as h:
        resp = h.post(
            f"/s/{session_id}/v1/chat/completions", json={"model": "m", "messages": messages}
        )
        assert resp.status_code == 200, resp.text
        replied(h, session_id)  # the console counts the reply, stored just after its answer


def _other_output(round_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same tool round (its tool_call_id too) with another output."""
    user, call, result = round_
    return [user, call, {**result, "content": result["content"].replace("file 1", "file 9")}]


def _page_back_first_page(page: Any, text: str) -> Any:
    cut = page.get_by_test_id("message-list").locator("[data-tool-call-id=call_1]")
    cut.locator("[data-mark=truncated]").wait_for()
    cut.get_by_test_id("raw-page").click()
    cut.get_by_test_id("raw-output").filter(has_text=text).wait_for()
    return cut


def test_a_session_started_again_after_a_delete_shows_only_its_own_raw_output(
    console: Page, console_proxy: ProxyServer
) -> None:
    old = tool_round(1, 5000)  # past MAX_CHARS: cut, its raw output pages back
    _post(console_proxy, "reborn", old)
    page = sign_in(console, "#/s/reborn")
    cut = _page_back_first_page(page, "file 1 line 0000")

    with api(console_proxy) as h:  # another client deletes it, then starts it again
        assert h.delete("/v1/sessions/reborn").status_code in (200, 204)
    page.get_by_text("no session with this id").wait_for()
    _post(console_proxy, "reborn", _other_output(old))
    page.get_by_test_id("composer-input").fill("What next?")  # the page loads it again
    page.get_by_test_id("composer-send").click()
    cut.locator("[data-mark=truncated]").wait_for()
    assert cut.get_by_test_id("raw-output").count() == 0  # nothing paged back of this one yet
    cut.get_by_test_id("raw-page").click()
    raw = cut.get_by_test_id("raw-output")
    raw.filter(has_text="file 9 line 0000").wait_for()
    assert "file 1" not in raw.inner_text()


def test_a_reset_forgets_the_raw_outputs_paged_back(
    console: Page, console_proxy: ProxyServer
) -> None:
    old = tool_round(1, 5000)
    _post(console_proxy, "redone", old)
    page = sign_in(console, "#/s/redone")
    cut = _page_back_first_page(page, "file 1 line 0000")

    page.get_by_test_id("action-reset").click()
    page.get_by_test_id("confirm-ok").click()
    page.get_by_test_id("status-line").filter(has_text="reset").wait_for()
    cut.wait_for(state="detached")
    _post(console_proxy, "redone", _other_output(old))  # its events reload the page
    cut.locator("[data-mark=truncated]").wait_for()
    assert cut.get_by_test_id("raw-output").count() == 0
    cut.get_by_test_id("raw-page").click()
    raw = cut.get_by_test_id("raw-output")
    raw.filter(has_text="file 9 line 0000").wait_for()
    assert "file 1" not in raw.inner_text()


def test_a_result_that_replaced_one_paged_back_shows_only_its_own_raw_output(
    console: Page, console_proxy: ProxyServer
) -> None:
    old = tool_round(1, 5000)
    _post(console_proxy, "edited", old)
    page = sign_in(console, "#/s/edited")
    cut = _page_back_first_page(page, "file 1 line 0000")
    # the client sends the history again with another result at that position, under the
    # same id (a retried call): the old one is superseded, the handle names the new one
    _post(console_proxy, "edited", _other_output(old))
    cut.locator("pre.body").filter(has_text="file 9 line 0000").wait_for()
    assert cut.get_by_test_id("raw-output").count() == 0
    cut.get_by_test_id("raw-page").click()
    raw = cut.get_by_test_id("raw-output")
    raw.filter(has_text="file 9 line 0000").wait_for()
    assert "file 1" not in raw.inner_text()


def _held_read(console: Page, session_id: str, hold: int) -> tuple[Any, list[str], list[Any]]:
    """The session's page, its result's raw-output read started, and the read's request
    number ``hold`` (1-based) held unanswered: the caller releases it."""
    asked: list[str] = []
    held: list[Any] = []

    def slow(route: Any) -> None:
        asked.append(route.request.url)
        if len(asked) == hold:
            held.append(route)
        else:
            route.continue_()

    console.page.route(f"**/v1/sessions/{session_id}/tool-outputs/**", slow)
    page = sign_in(console, f"#/s/{session_id}")
    cut = page.get_by_test_id("message-list").locator("[data-tool-call-id=call_1]")
    cut.locator("[data-mark=truncated]").wait_for()
    cut.get_by_test_id("raw-page").click()
    wait_for(lambda: bool(held), page)
    return page, asked, held


@pytest.mark.parametrize("replaced_by", ["another result", "a reset"])
def test_a_raw_output_read_stops_when_its_row_is_replaced(
    replaced_by: str, console: Page, console_proxy: ProxyServer
) -> None:
    """A press reads page after page (four of the proxy's pages here). The row is replaced
    while a page is on its way (a result superseded at its position under the same call id,
    held at its second page; a reset and the same history sent again, held at its first):
    the read stops there and writes nothing into the new row at that place."""
    sid = "superseded" if replaced_by == "another result" else "reset-under"
    old = tool_round(1, 5000)
    _post(console_proxy, sid, old)
    page, asked, held = _held_read(console, sid, 2 if replaced_by == "another result" else 1)
    cut = page.get_by_test_id("message-list").locator("[data-tool-call-id=call_1]")
    if replaced_by == "a reset":
        page.get_by_test_id("action-reset").click()
        page.get_by_test_id("confirm-ok").click()
        cut.wait_for(state="detached")
    _post(console_proxy, sid, _other_output(old))  # its events reload the page
    cut.locator("pre.body").filter(has_text="file 9 line 0000").wait_for()
    with page.expect_request_finished(lambda r: "/tool-outputs/" in r.url):
        held[0].continue_()
    settled(page)  # the page has read that page, and asked for any after it
    assert cut.get_by_test_id("raw-output").count() == 0
    assert len(asked) == (2 if replaced_by == "another result" else 1)  # no page after it
    assert page.get_by_test_id("toast").count() == 0
    assert cut.get_by_test_id("raw-status").inner_text() == ""  # nothing read, none reading
    cut.get_by_test_id("raw-page").click()  # the new row's own read goes on as ever
    raw = cut.get_by_test_id("raw-output")
    raw.filter(has_text="file 9 line 0000").wait_for()
    assert "file 1" not in raw.inner_text()


def test_a_raw_output_read_whose_row_was_replaced_fails_unsaid(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A page refused once its row was replaced is no error of the row shown there: no
    toast says it, and the new row's button still offers its own output."""
    old = tool_round(1, 5000)
    _post(console_proxy, "refused-raw", old)
    page, _, held = _held_read(console, "refused-raw", 2)
    cut = page.get_by_test_id("message-list").locator("[data-tool-call-id=call_1]")
    _post(console_proxy, "refused-raw", _other_output(old))
    cut.locator("pre.body").filter(has_text="file 9 line 0000").wait_for()
    with page.expect_request_finished(lambda r: "/tool-outputs/" in r.url):
        held[0].fulfill(status=503, json={"error": {"message": "restarting"}})
    settled(page)  # the page has read the refusal, and drawn any toast of it
    assert page.get_by_test_id("toast").count() == 0
    assert cut.get_by_test_id("raw-output").count() == 0
    assert cut.get_by_test_id("raw-status").inner_text() == ""  # nothing read, none reading


@pytest.mark.parametrize("leave_for", ["#/s/elsewhere", "#/"])
def test_the_handoff_toast_goes_with_its_session_view(
    leave_for: str, console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    started(console_proxy, "nudged")
    started(console_proxy, "elsewhere")
    page = sign_in(console, "#/s/nudged")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    toasts = page.locator("[data-testid=toast][data-kind=handoff]")
    inject(db_dsn, "nudged", "context.handoff_suggested", {"fraction": 0.91})
    toasts.filter(has_text="91%").wait_for()
    page.evaluate("(hash) => { location.hash = hash; }", leave_for)
    toasts.first.wait_for(state="detached")
    page.wait_for_timeout(300)  # fixed: nothing later orders a toast that comes back
    assert toasts.count() == 0


@pytest.mark.parametrize(
    ("rounds", "after", "text"),
    [
        (70, [], "Show 12 earlier messages (12 not shown)"),
        (66, [{"role": "user", "content": "go on"}], "Show 1 earlier message (1 not shown)"),
    ],
)
def test_load_earlier_names_the_rows_it_will_add_when_fewer_than_a_window_are_left(
    rounds: int, after: list[dict[str, Any]], text: str, console: Page, console_proxy: ProxyServer
) -> None:
    """The button says how many rows a press adds: the rows left when fewer than a window
    (WINDOW, 200) are, not 200; one row is one message."""
    history = [{"role": "system", "content": "You are a coding agent."}]
    history += [m for i in range(rounds) for m in tool_round(i, 40)] + after
    _post(console_proxy, "longish", history)  # and the reply: len(history) + 1 rows
    page = sign_in(console, "#/s/longish")
    earlier = page.get_by_test_id("load-earlier")
    earlier.filter(has_text="not shown").wait_for()
    assert earlier.inner_text() == text
    earlier.click()
    earlier.wait_for(state="hidden")
    rows = page.get_by_test_id("message-list").locator("[data-testid=message]")
    assert rows.count() == len(history) + 1
