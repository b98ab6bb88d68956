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


def test_the_list_reads_a_page_at_a_time_and_the_filter_asks_the_proxy(
    console: Page, console_proxy: ProxyServer
) -> None:
    """2000 sessions, stood in for (storing them takes long): the list asks for the first 500,
    the button for the 500 after the rows read (a session repeated at the seam, one used
    between the two reads, is shown once), and the filter for the sessions that match, so a
    session on no page read yet is found."""
    total, asked = 2000, []
    ids = [f"sess-{i:04d}" for i in range(total)]

    def listed(route: Any) -> None:
        url = httpx.URL(route.request.url)
        asked.append(url.query.decode())
        offset, limit = int(url.params["offset"]), int(url.params["limit"])
        q = url.params.get("q", "").lower()
        matching = [i for i in ids if q in i.lower()]
        start = offset - 1 if offset == 500 and not q else offset  # one seen again at the seam
        data = [{"id": i, "agent": "default", "message_count": 2} for i in matching]
        more = offset + limit < len(matching)
        route.fulfill(
            json={"object": "list", "data": data[start : offset + limit], "has_more": more}
        )

    console.page.route("**/v1/sessions?*", listed)
    page = sign_in(console)
    rows, more = page.get_by_test_id("session-row"), page.get_by_test_id("sessions-more")
    more.filter(has_text="Show more sessions").wait_for()
    assert rows.count() == 500
    assert rows.first.get_attribute("data-session-id") == "sess-0000"
    assert asked == ["limit=500&offset=0"]  # one page, not every session
    more.click()
    wait_for(lambda: rows.count() == 1000, page)
    assert asked[1:] == ["limit=500&offset=500"]
    assert rows.nth(999).get_attribute("data-session-id") == "sess-0999"
    more.click()  # the next read starts after the 501 rows the proxy gave, not the 1000 shown
    wait_for(lambda: rows.count() == 1500, page)
    assert asked[2:] == ["limit=500&offset=1001"]
    page.get_by_test_id("session-filter").press_sequentially("SESS-19")
    wait_for(lambda: rows.count() == 100, page)  # sess-1900 … sess-1999, all shown: no button
    assert rows.first.get_attribute("data-session-id") == "sess-1900"
    assert more.is_hidden()
    assert asked[-1] == "limit=500&offset=0&q=SESS-19"
    assert len(asked) < 3 + len("SESS-19")  # typing pauses before the proxy is asked


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
