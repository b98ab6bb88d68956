"""The sessions list and the session view say the same occupancy: the API's, which is the
provider's count of the last prompt or, when the provider reported no usage, the proxy's
calibrated estimate. The list drew only the provider's count, so a session whose provider
sends no usage was "0 / limit" in the list and its estimate in the view. And the list shows
its latest read, whatever order the reads answer in."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import api, sign_in, wait_for
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)


def test_the_list_shows_the_occupancy_the_session_view_shows(
    console: Page, console_proxy: ProxyServer
) -> None:
    started(console_proxy, "no-usage")  # the fake provider's reply carries no usage
    with api(console_proxy) as h:
        shown = h.get("/v1/sessions/no-usage").json()
        (listed,) = h.get("/v1/sessions").json()["data"]
    assert shown["last_prompt_tokens"] is None and shown["occupancy"] > 0
    assert listed["occupancy"] == shown["occupancy"]
    page = sign_in(console, "#/")
    row = page.locator("[data-testid=session-row][data-session-id=no-usage]")
    row.filter(has_text=f"{shown['occupancy']:,} / 8,000").wait_for()
    width = row.locator(".seg").evaluate("n => parseFloat(n.style.width)")
    assert width == pytest.approx(100 * shown["occupancy"] / 8000)
    row.click()
    page.get_by_test_id("usage-text").filter(has_text=f"{shown['occupancy']:,} / 8,000").wait_for()


def test_a_list_read_that_answers_late_does_not_replace_a_newer_one(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The list is left and opened again while its first read is still on its way: the
    first read, answering last, holds the list as it was before the session began."""
    held: list[tuple[Any, Any]] = []

    def first_read_late(route: Any) -> None:
        if held:
            route.continue_()
        else:  # read now, answered once the test says
            held.append((route, route.fetch()))

    console.page.route("**/v1/sessions?*", first_read_late)
    page = sign_in(console, "#/")
    wait_for(lambda: bool(held), page)
    started(console_proxy, "begun")
    page.evaluate("location.hash = '#/s/begun'")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    page.evaluate("location.hash = '#/'")
    rows = page.locator("[data-testid=session-row][data-session-id=begun]")
    rows.wait_for()
    route, response = held[0]
    with page.expect_event("requestfinished"):
        route.fulfill(response=response)
    page.evaluate("() => new Promise((done) => setTimeout(done, 100))")  # its answer is read
    assert rows.count() == 1 and page.locator("#list-empty").is_hidden()
