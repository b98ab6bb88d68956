"""The sessions list at scale: the console reads a page of sessions at a time and its filter
asks the proxy (``GET /v1/sessions?q=``), so a proxy with thousands of sessions sends one page
per visit to the list, not all of them, and the filter still finds any session."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import sign_in, wait_for
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)


def _stood_in(total: int, asked: list[str], seam: bool = False) -> Any:
    """The proxy's ``GET /v1/sessions`` over ``total`` sessions (``?q=`` as it reads it), a
    page's ``next_cursor`` its last row's id, each query noted in ``asked``; with ``seam``, a
    session is added at the front after the first read, which moves every row one down."""
    ids = [f"sess-{i:04d}" for i in range(total)]

    def listed(route: Any) -> None:
        url = httpx.URL(route.request.url)
        asked.append(url.query.decode())
        cursor, limit = url.params.get("cursor", ""), int(url.params["limit"])
        assert "offset" not in url.params
        q = url.params.get("q", "").lower()
        front = ["sess-new"] if seam and len(asked) > 1 else []
        matching = [
            {"id": i, "agent": "default", "message_count": 2} for i in front + ids if q in i
        ]
        start = next(n + 1 for n, s in enumerate(matching) if s["id"] == cursor) if cursor else 0
        rows, more = matching[start : start + limit], start + limit < len(matching)
        route.fulfill(
            json={
                "object": "list",
                "data": rows,
                "has_more": more,
                "next_cursor": rows[-1]["id"] if more else None,
            }
        )

    return listed


def test_the_list_reads_a_page_at_a_time_and_the_filter_asks_the_proxy(
    console: Page, console_proxy: ProxyServer
) -> None:
    """2000 sessions, stood in for (storing them takes long): the list asks for the first 500,
    the button for the 500 after the last page's ``next_cursor`` (a session added at the
    front between the two reads neither repeats a row nor skips one), and the filter for the
    sessions that match, so a session on no page read yet is found."""
    asked: list[str] = []
    console.page.route("**/v1/sessions?*", _stood_in(2000, asked, seam=True))
    page = sign_in(console)
    rows, more = page.get_by_test_id("session-row"), page.get_by_test_id("sessions-more")
    more.filter(has_text="Show more sessions").wait_for()
    assert rows.count() == 500
    assert rows.first.get_attribute("data-session-id") == "sess-0000"
    assert asked == ["limit=500"]  # one page, not every session
    more.click()
    wait_for(lambda: rows.count() == 1000, page)
    assert asked[1:] == ["limit=500&cursor=sess-0499"]
    assert rows.nth(500).get_attribute("data-session-id") == "sess-0500"
    assert rows.nth(999).get_attribute("data-session-id") == "sess-0999"
    more.click()
    wait_for(lambda: rows.count() == 1500, page)
    assert asked[2:] == ["limit=500&cursor=sess-0999"]
    page.get_by_test_id("session-filter").fill("SESS-19")
    wait_for(lambda: rows.count() == 100, page)  # sess-1900 … sess-1999, all shown: no button
    assert rows.first.get_attribute("data-session-id") == "sess-1900"
    assert more.is_hidden()
    assert asked[-1] == "limit=500&q=SESS-19"


def test_a_session_made_between_two_pages_is_neither_repeated_nor_skipped(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The real proxy's list, two sessions a page (the page's ``limit`` rewritten on its
    way): a session started between two reads goes to the front, and at an offset the next
    page began one row back, the first page's last row again (shown once: a page one row
    short). From the page's ``next_cursor`` it holds the two rows after that one."""
    for n in range(1, 6):
        started(console_proxy, f"old-{n}")

    def two_a_page(route: Any) -> None:
        route.continue_(url=route.request.url.replace("limit=500", "limit=2"))

    console.page.route("**/v1/sessions?*", two_a_page)
    page = sign_in(console)
    rows, more = page.get_by_test_id("session-row"), page.get_by_test_id("sessions-more")
    more.filter(has_text="Show more sessions").wait_for()
    assert [r.get_attribute("data-session-id") for r in rows.all()] == ["old-5", "old-4"]
    started(console_proxy, "new-1")
    more.click()
    wait_for(lambda: rows.count() >= 3 and not more.is_disabled(), page)
    shown = [r.get_attribute("data-session-id") for r in rows.all()]
    assert shown == ["old-5", "old-4", "old-3", "old-2"]
    more.click()
    wait_for(lambda: rows.count() == 5, page)
    assert rows.nth(4).get_attribute("data-session-id") == "old-1"
    assert more.is_hidden()
    assert all("offset=" not in u for u in console.urls if "/v1/sessions?" in u)


def test_the_filter_finds_sessions_on_the_proxy(console: Page, console_proxy: ProxyServer) -> None:
    """The real proxy's ``?q=`` behind the filter: by id, case aside, and by agent."""
    started(console_proxy, "alpha-run")
    started(console_proxy, "beta-run")
    page = sign_in(console)
    rows = page.get_by_test_id("session-row")
    wait_for(lambda: rows.count() == 2, page)
    page.get_by_test_id("session-filter").fill("BETA")
    wait_for(lambda: rows.count() == 1, page)
    assert rows.first.get_attribute("data-session-id") == "beta-run"
    page.get_by_test_id("session-filter").fill("default")  # the agent
    wait_for(lambda: rows.count() == 2, page)


def test_a_filter_typed_before_a_next_page_is_read_after_it(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The button pressed while the filter waits for the typing to stop reads the next page
    of the list shown, and the filter is read after it: the press dropped the filter, and the
    list showed every session under a filter that matched a few."""
    console.page.route("**/v1/sessions?*", _stood_in(1200, []))
    page = sign_in(console)
    rows = page.get_by_test_id("session-row")
    wait_for(lambda: rows.count() == 500, page)
    # typed and pressed in one task of the page, so the filter's pause cannot end between them
    # (a loaded machine's click came after it: the list was filtered and the button gone)
    page.evaluate(
        "() => { const f = document.getElementById('filter'); f.value = 'sess-11';"
        " f.dispatchEvent(new Event('input')); document.getElementById('sessions-more').click(); }"
    )
    wait_for(lambda: rows.count() == 100, page)  # sess-1100 … sess-1199
    assert rows.first.get_attribute("data-session-id") == "sess-1100"


def test_the_keyboard_keeps_its_place_through_the_pages(
    console: Page, console_proxy: ProxyServer
) -> None:
    """Enter on the button reads the next page; the focus stays on the button while more
    follow, and when the last page hides it, goes to the first session that page added: left
    on a hidden button it fell to the page's body, and the next Tab started at the top."""
    console.page.route("**/v1/sessions?*", _stood_in(1200, []))
    page = sign_in(console)
    rows, more = page.get_by_test_id("session-row"), page.get_by_test_id("sessions-more")
    more.filter(has_text="Show more sessions").wait_for()
    more.focus()
    more.press("Enter")
    wait_for(lambda: rows.count() == 1000 and not more.is_disabled(), page)
    assert page.evaluate("document.activeElement.id") == "sessions-more"
    more.press("Enter")
    wait_for(lambda: rows.count() == 1200, page)
    assert more.is_hidden()
    focused = "document.activeElement.closest('[data-testid=session-row]')?.dataset.sessionId"
    wait_for(lambda: page.evaluate(focused) == "sess-1000", page)
