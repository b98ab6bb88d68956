"""What the console says while it cannot do what was asked, and how often: a raw output's
button keeps its name while it pages (a screen reader said the focused button's new name at
every page read), one proxy away is one alert (the load's and the event stream's were two),
and a failure no try mends (an answer that is not JSON) is said once, not tried for ever.

The ``console`` fixture checks that the page raised no error and asked no host but the proxy.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import posted, sign_in, tool_round, wait_for
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)

_NAMED = "Show the raw output of read_file (call_1)"


def test_a_raw_output_buttons_name_stays_while_it_pages(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """Pressed from the keyboard, a spill of about 60,000 characters reads some thirty pages
    a press: the focused button's name stays, and the status beside it (a live region) says
    "Reading…" once a press, then how much is shown, then that all is: it said each page's
    count as it came, some thirty polite announcements a press."""
    from playwright.sync_api import expect

    fake_upstream.script(reply("ok"))
    posted(console_proxy, "named-raw", tool_round(1, 70_000))
    page = sign_in(console, "#/s/named-raw")
    row = page.get_by_test_id("message-list").locator("[data-tool-call-id=call_1]")
    button = row.get_by_role("button", name=_NAMED)
    status = row.get_by_role("status")
    button.focus()
    button.evaluate(
        """(b) => { window.renamed = [];
             new MutationObserver((changes) => { for (const c of changes) window.renamed.push(
               c.type === "attributes" ? b.getAttribute("aria-label") : b.textContent); })
             .observe(b, { attributes: true, attributeFilter: ["aria-label"],
                           childList: true, characterData: true, subtree: true }); }"""
    )
    status.evaluate(
        """(s) => { window.said = [];
             new MutationObserver(() => window.said.push(s.textContent))
             .observe(s, { childList: true, characterData: true, subtree: true }); }"""
    )
    page.keyboard.press("Enter")
    expect(status).to_contain_text("characters shown: press again for the next page")
    page.keyboard.press("Enter")
    expect(status).to_have_text("All shown")
    expect(button).to_have_accessible_name(_NAMED)
    assert page.evaluate("window.renamed") == []
    said = page.evaluate("window.said")
    assert said[0::2] == ["Reading…", "Reading…"] and said[3] == "All shown", said
    assert len(said) == 4 and said[1].endswith("press again for the next page"), said
    assert button.get_attribute("aria-disabled") == "true"
    assert page.evaluate("document.activeElement.dataset.testid") == "raw-page"


def _away(console: Page, console_proxy: ProxyServer, sid: str) -> tuple[Any, Any]:
    """Session ``sid``'s view, opened while its load and its event stream reach nothing,
    once each was tried again: the page, and its error alerts."""
    started(console_proxy, sid)
    loads: list[str] = []
    streams: list[str] = []

    def unreached(tries: list[str]) -> Any:
        return lambda route: (tries.append(route.request.url), route.abort())

    console.page.route(f"**/v1/sessions/{sid}", unreached(loads))
    console.page.route(f"**/v1/sessions/{sid}/events", unreached(streams))
    page = sign_in(console, f"#/s/{sid}")
    alerts = page.locator("[data-testid=toast][data-kind=error]")
    # each tried again: each failure before it was handled, its alert raised or not
    wait_for(lambda: len(loads) >= 2 and len(streams) >= 2, page, 15_000)
    return page, alerts


def test_one_proxy_away_is_one_alert_and_it_goes_when_the_proxy_is_back(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The session's load and its event stream both reach nothing: each was said in an
    alert of its own. Once the proxy answers again, the view loads and the alert goes."""
    page, alerts = _away(console, console_proxy, "away")
    assert alerts.count() == 1, alerts.all_inner_texts()
    assert "could not be reached" in alerts.inner_text()
    page.unroute("**/v1/sessions/away")
    page.unroute("**/v1/sessions/away/events")
    page.locator("#session-meta").filter(has_text="agent").wait_for(timeout=15_000)
    page.get_by_test_id("toast").filter(has_text="Live updates are back").wait_for(timeout=15_000)
    wait_for(lambda: alerts.count() == 0, page)
    console.errors.clear()  # the aborted requests' own console lines


def test_an_answer_no_try_mends_is_said_once_and_not_tried_again(
    console: Page, console_proxy: ProxyServer
) -> None:
    """An answer that is not JSON (a page in front of the proxy) fails with no HTTP status,
    as a proxy out of reach does: it was tried again every 30 s for as long as the view
    stayed open, "trying again" said with it. The page's clock is run forward a minute; the
    event stream is held, as its events would load the view again."""
    started(console_proxy, "not-json")
    tries: list[str] = []

    def page_in_front(route: Any) -> None:
        tries.append(route.request.url)
        route.fulfill(status=200, content_type="text/html", body="<html>a portal</html>")

    held: list[Any] = []
    console.page.clock.install()
    console.page.route("**/v1/sessions/not-json", page_in_front)
    # the stream held unanswered: the events it replays (the turn's) would each load again
    console.page.route("**/v1/sessions/not-json/events", lambda r: held.append(r))
    page = sign_in(console, "#/s/not-json")
    said = page.get_by_test_id("toast").filter(has_text="Could not load the session")
    said.wait_for()
    assert "trying again" not in said.inner_text()
    page.clock.run_for(65_000)
    page.evaluate("fetch('/healthz').then((r) => r.status)")  # the page's requests so far, seen
    assert len(tries) == 1, tries
    console.errors.clear()


def test_an_answer_cut_before_its_end_is_one_a_later_try_may_mend(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The proxy reached, its answer cut short (it restarted while sending a long history):
    the browser's TypeError came from reading the body, unmarked, so the load was said once
    and not tried again, where a proxy out of reach is; an answer that is not JSON is still
    the one no try mends."""
    page = sign_in(console)
    page.get_by_test_id("session-list").wait_for(state="attached")
    marks = page.evaluate(
        """async () => {
          const { call } = await import("/ui/static/api.js");
          const { passing } = await import("/ui/static/outage.js");
          const real = window.fetch;
          const tried = async (body) => {
            window.fetch = async () => new Response(body, { status: 200 });
            try { await call("GET", "/v1/models"); return "answered"; }
            catch (err) { return passing(err); }
            finally { window.fetch = real; }
          };
          const cut = new ReadableStream({ start(c) {
            c.enqueue(new TextEncoder().encode('{"data": ['));
            c.error(new TypeError("network error")); } });
          return [await tried(cut), await tried("<html>a portal</html>")];
        }"""
    )
    assert marks == [True, False]


def test_the_outage_alert_stays_while_the_event_stream_is_still_lost(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The load answers again before the event stream does: the one alert both share
    stays, as the live updates are still stopped, and goes once the stream is back."""
    page, alerts = _away(console, console_proxy, "half")
    page.unroute("**/v1/sessions/half")
    page.locator("#session-meta").filter(has_text="agent").wait_for(timeout=15_000)
    # the load settled (its failure no longer held): the list is no longer busy
    page.locator("#message-list:not([aria-busy])").wait_for(state="attached")
    assert alerts.count() == 1, alerts.all_inner_texts()
    page.unroute("**/v1/sessions/half/events")
    page.get_by_test_id("toast").filter(has_text="Live updates are back").wait_for(timeout=40_000)
    wait_for(lambda: alerts.count() == 0, page)
    console.errors.clear()  # the aborted requests' own console lines
