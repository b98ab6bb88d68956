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
    """The proxy's ``GET /v1/sessions`` over ``total`` sessions (``?q=`` as it reads it),
    each query noted in ``asked``; with ``seam``, a session is added at the front after the
    first read, so every later page starts one row back: its first row was the first page's
    last."""
    ids = [f"sess-{i:04d}" for i in range(total)]

    def listed(route: Any) -> None:
        url = httpx.URL(route.request.url)
        asked.append(url.query.decode())
        offset, limit = int(url.params["offset"]), int(url.params["limit"])
        q = url.params.get("q", "").lower()
        matching = [{"id": i, "agent": "default", "message_count": 2} for i in ids if q in i]
        start = offset - 1 if seam and offset and not q else offset
        more = start + limit < len(matching)
        route.fulfill(
            json={"object": "list", "data": matching[start : start + limit], "has_more": more}
        )

    return listed


def test_the_list_reads_a_page_at_a_time_and_the_filter_asks_the_proxy(
    console: Page, console_proxy: ProxyServer
) -> None:
    """2000 sessions, stood in for (storing them takes long): the list asks for the first 500,
    the button for the 500 after the rows read (a session repeated at the seam, pushed down
    by one added between the two reads, is shown once), and the filter for the sessions
    that match, so a session on no page read yet is found."""
    asked: list[str] = []
    console.page.route("**/v1/sessions?*", _stood_in(2000, asked, seam=True))
    page = sign_in(console)
    rows, more = page.get_by_test_id("session-row"), page.get_by_test_id("sessions-more")
    more.filter(has_text="Show more sessions").wait_for()
    assert rows.count() == 500
    assert rows.first.get_attribute("data-session-id") == "sess-0000"
    assert asked == ["limit=500&offset=0"]  # one page, not every session
    more.click()
    wait_for(lambda: rows.count() == 999, page)
    assert asked[1:] == ["limit=500&offset=500"]
    assert rows.nth(998).get_attribute("data-session-id") == "sess-0998"
    more.click()  # the next read starts after the 1000 rows the proxy gave, not the 999 shown
    wait_for(lambda: rows.count() == 1499, page)
    assert asked[2:] == ["limit=500&offset=1000"]
    page.get_by_test_id("session-filter").fill("SESS-19")
    wait_for(lambda: rows.count() == 100, page)  # sess-1900 … sess-1999, all shown: no button
    assert rows.first.get_attribute("data-session-id") == "sess-1900"
    assert more.is_hidden()
    assert asked[-1] == "limit=500&offset=0&q=SESS-19"


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
