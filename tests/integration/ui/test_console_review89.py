"""The console57 changes, reviewed: what they missed. A raw output read on past the view it
was pressed in wrote into the next session's rows; a load refused after a failed one left
"trying again" said with nothing trying, and the alert closed came back at each try; the
raw-output button's name, hidden in its text, was copied with a selection; a press said
nothing until its first page came.

Each test fails on the console before its fix; the ``console`` fixture checks that the page
raised no error and asked no host but the proxy.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.settle import settled
from tests.integration.ui.test_console import posted, sign_in, tool_round, wait_for
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)


def test_a_raw_output_read_stops_when_the_view_closes(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """A press reads page after page (about thirty-four of the proxy's 1,500-character
    pages here). The reader opens another session meanwhile: the read stops there, and
    writes nothing into the rows now shown, though the other session's cut result sits at
    the same place with the same call id."""
    fake_upstream.script(reply("ok"), reply("ok"))
    posted(console_proxy, "spill-a", tool_round(1, 70_000))
    posted(console_proxy, "spill-b", tool_round(1, 5000))
    asked: list[str] = []
    held: list[Any] = []

    def slow(route: Any) -> None:
        asked.append(route.request.url)
        if len(asked) == 3:
            held.append(route)  # answered once the view has gone
        else:
            route.continue_()

    console.page.route("**/v1/sessions/spill-a/tool-outputs/**", slow)
    page = sign_in(console, "#/s/spill-a")
    page.locator("[data-tool-call-id=call_1]").get_by_test_id("raw-page").click()
    wait_for(lambda: bool(held), page)
    page.evaluate("location.hash = '#/s/spill-b'")
    other = page.get_by_test_id("message-list").locator("[data-tool-call-id=call_1]")
    other.get_by_test_id("raw-page").wait_for()
    with page.expect_request_finished(lambda r: "/spill-a/tool-outputs/" in r.url):
        held[0].continue_()
    settled(page)  # the page has read that page, and asked for any after it
    assert len(asked) == 3  # no page read after the one under way
    assert other.get_by_test_id("raw-output").count() == 0
    assert page.get_by_test_id("toast").count() == 0


def test_a_load_refused_after_a_failed_one_no_longer_says_trying_again(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The first load meets a 503 (said: "trying again"), the try after it a 403 that no
    try changes: the view stops trying, and says so, not "trying again" as well."""
    started(console_proxy, "refused")
    answers = iter([503])

    def session(route: Any) -> None:
        status = next(answers, 403)
        route.fulfill(status=status, json={"error": {"message": f"status {status}"}})

    console.page.route("**/v1/sessions/refused", session)
    page = sign_in(console, "#/s/refused")
    toasts = page.get_by_test_id("toast")
    toasts.filter(has_text="status 403").wait_for(timeout=5000)
    settled(page)  # a toast raised with it has its text (a frame after its box)
    assert toasts.filter(has_text="trying again").count() == 0
    console.errors.clear()  # the refusals' own console lines


def test_a_raw_output_buttons_name_is_not_copied_with_its_row(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The button's name tells its result from another's (the tool and the call) to a screen
    reader; a selection of the row copies what is seen, not that hidden text."""
    fake_upstream.script(reply("ok"))
    posted(console_proxy, "copied", tool_round(1, 5000))
    page = sign_in(console, "#/s/copied")
    row = page.get_by_test_id("message-list").locator("[data-tool-call-id=call_1]")
    button = row.get_by_role("button", name="Show the raw output of read_file (call_1)")
    button.wait_for()
    copied = row.evaluate(
        """(li) => { const range = document.createRange(); range.selectNodeContents(li);
             getSelection().removeAllRanges(); getSelection().addRange(range);
             return getSelection().toString(); }"""
    )
    assert "Show the raw output" in copied
    assert "(call_1)" not in copied
    button.click()
    row.get_by_test_id("raw-status").filter(has_text="All shown").wait_for()
    assert button.count() == 1  # named as it was


def test_a_failed_load_closed_by_the_person_is_not_said_again_at_each_try(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The view tries a failed load again by itself and says so once: the person who closed
    that alert is not alerted again at the next try (every 30 s, as long as the proxy
    fails)."""
    started(console_proxy, "down")
    tries: list[str] = []

    def session(route: Any) -> None:
        tries.append(route.request.url)
        route.fulfill(status=503, json={"error": {"message": "restarting"}})

    console.page.route("**/v1/sessions/down", session)
    page = sign_in(console, "#/s/down")
    said = page.get_by_test_id("toast").filter(has_text="trying again")
    said.get_by_role("button", name="Close").click()
    wait_for(lambda: len(tries) >= 2, page)  # the try a second on
    # a fixed wait: the try's refusal is handled after the route saw it, and the next try,
    # which would order it, comes 30 s on
    page.wait_for_timeout(200)
    assert said.count() == 0
    console.errors.clear()  # the 503s' own console lines


def test_a_raw_output_press_says_reading_before_its_first_page_comes(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The press says Reading… and takes no other press from the moment it is made, not from
    its first page on (a slow proxy showed no change at all meanwhile); a first page that
    fails gives the button back as it was."""
    fake_upstream.script(reply("ok"))
    posted(console_proxy, "slow-raw", tool_round(1, 5000))
    held: list[Any] = []
    console.page.route("**/v1/sessions/slow-raw/tool-outputs/**", lambda r: held.append(r))
    page = sign_in(console, "#/s/slow-raw")
    button = page.locator("[data-tool-call-id=call_1]").get_by_test_id("raw-page")
    button.click()
    wait_for(lambda: bool(held), page)
    said = page.locator("[data-tool-call-id=call_1]").get_by_test_id("raw-status")
    assert said.inner_text() == "Reading…"
    assert button.get_attribute("aria-disabled") == "true"
    held[0].fulfill(status=503, json={"error": {"message": "restarting"}})
    page.get_by_test_id("toast").filter(has_text="Could not page the output back").wait_for()
    assert button.inner_text() == "Show the raw output" and said.inner_text() == ""
    assert button.get_attribute("aria-disabled") == "false"
    console.errors.clear()  # the 503's own console line
