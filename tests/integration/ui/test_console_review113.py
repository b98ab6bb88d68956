"""What a screen reader and a test are told as the session view's state changes: a toast is
in the page before its text (a live region added with its text already in it is not
announced), the usage meter's value text says what its text line says, and the event
stream's ``data-stream`` says it is not live once the proxy ended it.

The ``console`` fixture checks that the page raised no error and asked no host but the proxy.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import posted, sign_in, stream_live, wait_for

pytestmark = pytest.mark.timeout(60)

# each toast added, with its role and its text as the box's observer first sees it (after
# the task that added it); two of the same text and an alert, given at once
_TOASTS = """async () => {
  const { toast } = await import("/ui/static/app.js");
  const seen = [];
  new MutationObserver((records) => {
    for (const r of records) for (const n of r.addedNodes) {
      seen.push([n.getAttribute("role"), n.querySelector("span").textContent]);
    }
  }).observe(document.getElementById("toasts"), { childList: true });
  toast("Saved once.");
  toast("Saved once.");
  toast("It broke.", "error");
  await new Promise((resolve) => setTimeout(resolve));
  return seen;
}"""


def test_a_toast_is_in_the_page_before_its_text(console: Page, console_proxy: ProxyServer) -> None:
    """A status toast goes in empty and says its text a frame later, once (the same text given
    again before that is the same toast); an alert says its text as it comes."""
    page = sign_in(console, "#/")
    page.get_by_test_id("new-session-open").wait_for()
    seen = page.evaluate(_TOASTS)
    assert seen == [["status", ""], ["alert", "It broke."]]
    toasts = page.get_by_test_id("toast")
    toasts.filter(has_text="Saved once.").wait_for()
    assert toasts.filter(has_text="Saved once.").count() == 1
    assert page.locator("[data-testid=toast][role=alert]").text_content() == "It broke.×"


def test_a_toast_updated_before_its_first_words_says_the_last(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A keyed toast given a new text before its first was written says the new one."""
    page = sign_in(console, "#/")
    page.get_by_test_id("new-session-open").wait_for()
    page.evaluate("""async () => {
      const { toast } = await import("/ui/static/app.js");
      toast("First words.", "info", 0, "k");
      toast("Last words.", "info", 0, "k");
    }""")
    page.get_by_test_id("toast").filter(has_text="Last words.").wait_for()
    assert page.get_by_test_id("toast").count() == 1


def _usage(page: Any, session: dict[str, Any]) -> tuple[str, str | None]:
    return page.evaluate(  # type: ignore[no-any-return]
        """async (session) => {
          const { renderUsage } = await import("/ui/static/render.js");
          const [bar, legend, text, reclaimed] = ["div", "ul", "p", "p"]
            .map((t) => document.createElement(t));
          renderUsage(session, { bar, legend, text, reclaimed });
          return [text.textContent, bar.getAttribute("aria-valuetext")];
        }""",
        session,
    )


def test_the_meter_says_the_window_changed_since(console: Page, console_proxy: ProxyServer) -> None:
    """The text line's "about N now" (the window's parts no longer what the provider last
    counted, as after a compaction) is in the meter's value text too, not only on screen."""
    page = sign_in(console, "#/")
    page.get_by_test_id("new-session-open").wait_for()
    text, said = _usage(
        page,
        {
            "context_limit": 128000,
            "occupancy": 78000,
            "usage": {"system": 1000, "messages": 20000},
            "reclaimed": {},
        },
    )
    assert text == "78,000 / 128,000 tokens (60.9%) · about 21,000 now"
    assert said == "60.9% of the window, 78,000 of 128,000 tokens, about 21,000 now"
    text, said = _usage(
        page,
        {"context_limit": 128000, "occupancy": 78000, "usage": {"messages": 78000}},
    )
    assert said == "60.9% of the window, 78,000 of 128,000 tokens"


def test_a_stream_the_proxy_ended_is_not_live(console: Page, console_proxy: ProxyServer) -> None:
    """The proxy ends the stream after its replay (asking for a reconnection a minute on):
    the view's ``data-stream`` no longer says ``live`` meanwhile, which a test waiting for a
    live stream would take for one."""
    posted(console_proxy, "ended", [{"role": "user", "content": "hi"}])
    console.page.route(
        "**/v1/sessions/ended/events",
        lambda route: route.fulfill(
            status=200,
            headers={"content-type": "text/event-stream", "cache-control": "no-store"},
            body=": live\n\nretry: 60000\n\n",
        ),
    )
    page = sign_in(console, "#/s/ended")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    page.locator("#session-view[data-stream=reconnecting]").wait_for(state="attached")


# the composer, which ends the page, is in sight at the window's bottom
_AT_END = """() => { const r = document.getElementById("composer").getBoundingClientRect();
  return r.bottom > 0 && r.bottom <= innerHeight + 1; }"""
_FRAME = "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))"


def test_a_reader_following_the_end_stays_there_when_the_window_gets_shorter(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The window made shorter (resized, zoomed in, an on-screen keyboard) keeps the page's
    top, taking the end out of sight: a reader who was at the end is put back there, so the
    next rows still follow; a reader scrolled up stays where they are."""
    said = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"line {i}"} for i in range(30)
    ]
    posted(console_proxy, "resized", said)
    page = sign_in(console, "#/s/resized")
    page.get_by_test_id("message-list").get_by_text("line 29").wait_for()
    stream_live(page)
    wait_for(lambda: page.evaluate(_AT_END), page)
    page.set_viewport_size({"width": 1280, "height": 560})
    wait_for(lambda: page.evaluate(_AT_END), page)
    page.evaluate("document.scrollingElement.scrollTop = 0")
    page.evaluate(_FRAME)  # its scroll event handled
    page.set_viewport_size({"width": 1280, "height": 400})
    page.evaluate(_FRAME)  # its resize event handled
    assert page.evaluate("document.scrollingElement.scrollTop") == 0


def test_a_stream_not_yet_answered_is_connecting(console: Page, console_proxy: ProxyServer) -> None:
    """Until the proxy answers the stream's request the view says ``connecting``, then
    ``live``: no state is missing from ``data-stream`` (none meant "not yet" before)."""
    posted(console_proxy, "asking", [{"role": "user", "content": "hi"}])
    held: list[Any] = []
    console.page.route("**/v1/sessions/asking/events", lambda route: held.append(route))
    page = sign_in(console, "#/s/asking")
    view = page.locator("#session-view")
    page.locator("#session-view[data-stream=connecting]").wait_for(state="attached")
    wait_for(lambda: bool(held), page)
    assert view.get_attribute("data-stream") == "connecting"
    held[0].continue_()
    page.locator("#session-view[data-stream=live]").wait_for(state="attached")
