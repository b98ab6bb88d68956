"""The console's accessibility fixes at their edges: a live update never moves a focus the
person did not lose, a box of text that scrolls is a Tab stop whatever the shape of its text,
and an alert is said at once.

The ``console`` fixture checks that the page raised no error and asked no host but the proxy.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import ROOMY, Page
from tests.integration.ui.test_console import inject, posted, sign_in, tool_round, wait_for
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)

# a toast raised from the page's own module (the one instance the page runs)
_TOAST = (
    "([text, kind, key]) => import('/ui/static/app.js')"
    ".then((m) => { m.toast(text, kind, 0, key); })"
)


def _active(page: Any) -> str:
    return str(
        page.evaluate(
            "document.activeElement === document.body ? 'body'"
            " : document.activeElement.dataset.testid || document.activeElement.id"
        )
    )


def test_a_toast_left_for_the_page_does_not_take_the_focus_back_when_another_comes(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """Tabbed to a toast's close button from the composer, then a click on the page's text
    (no control: the focus goes to the body). A toast coming later is no reason to put the
    keyboard back on the composer: the person moved it, nothing took it."""
    started(console_proxy, "away")
    page = sign_in(console, "#/s/away")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    inject(db_dsn, "away", "context.handoff_suggested", {"fraction": 0.9})
    toast = page.get_by_test_id("toast").filter(has_text="handing off")
    toast.wait_for()
    page.get_by_test_id("composer-send").focus()
    for _ in range(10):
        if toast.locator("button").evaluate("(b) => b === document.activeElement"):
            break
        page.keyboard.press("Tab")
    page.get_by_test_id("usage-text").click()  # text, not a control
    assert _active(page) == "body"
    page.evaluate(_TOAST, ["Another thing.", "info", None])
    page.get_by_test_id("toast").filter(has_text="Another thing.").wait_for()
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => setTimeout(r)))")
    assert _active(page) == "body"


def test_an_alert_updated_under_its_key_says_the_new_text_at_once(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A status may wait its turn (one text a second); an alert may not: what it says now
    is what the person must hear now."""
    page = sign_in(console)
    page.evaluate(_TOAST, ["The proxy is away.", "error", "outage"])
    alert = page.locator("[data-testid=toast][role=alert]")
    alert.filter(has_text="The proxy is away.").wait_for()
    page.evaluate(_TOAST, ["The proxy is back; reading again.", "error", "outage"])
    assert alert.inner_text().startswith("The proxy is back"), alert.inner_text()


@ROOMY
def test_a_message_of_short_lines_and_one_long_one_that_scrolls_is_a_tab_stop(
    console: Page, console_proxy: ProxyServer
) -> None:
    """Eleven short lines and one of 800 characters: under 900 characters and 13 lines, but
    the long line wraps to several, and the box scrolls. A box that scrolls and takes no
    focus cannot be scrolled from the keyboard (axe: scrollable-region-focusable)."""
    text = "\n".join([*(f"line {i}" for i in range(11)), "word " * 160])
    posted(console_proxy, "wrapped", [{"role": "user", "content": text}])
    page = sign_in(console, "#/s/wrapped")
    body = page.locator("[data-testid=message][data-role=user] pre.body").first
    body.wait_for()
    wait_for(lambda: body.evaluate("(b) => b.scrollHeight > b.clientHeight + 1"), page)
    assert body.evaluate("(b) => b.tabIndex") == 0


def test_a_row_moved_down_by_an_edited_history_keeps_the_focus_on_its_own_button(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The focus on a cut result's button, then the client sent its history again with a
    message before it: every row after that one moved down one position, and the window was
    read again and built again. The focus goes to the button of the same result, not to the
    row now at the position it had (the call before it, with no such button)."""
    fake_upstream.script(reply("ok"))
    posted(console_proxy, "shifted", tool_round(1, 5000))
    page = sign_in(console, "#/s/shifted")
    listing = page.get_by_test_id("message-list")
    button = listing.locator("[data-tool-call-id=call_1]").get_by_test_id("raw-page")
    button.focus()
    button.evaluate("(b) => { window.held = b; }")
    fake_upstream.script(reply("ok again"))
    history = [
        {"role": "user", "content": "first"},
        *tool_round(1, 5000),
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go on"},
    ]
    posted(console_proxy, "shifted", history)
    listing.get_by_text("ok again").wait_for()
    wait_for(lambda: not page.evaluate("window.held.isConnected"), page)
    held = page.evaluate(
        "(() => { const a = document.activeElement;"
        " const li = a.closest('[data-pos]');"
        " return [a.dataset.testid || a.tagName, li && li.dataset.toolCallId]; })()"
    )
    assert held == ["raw-page", "call_1"], held


def test_a_long_message_folded_into_the_summary_is_no_tab_stop(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A folded row's text is clipped to two lines (overflow hidden): it does not scroll, so
    a Tab stop on it moves nothing, and a compacted session had one per long folded row."""
    page = sign_in(console)
    stops = page.evaluate(
        """() => import('/ui/static/render.js').then((m) => [true, false].map((folded) => {
          const row = { pos: 3, role: "user", tokens: 9,
            message: { role: "user", content: "a long line ".repeat(400) } };
          return m.renderMessage(row, () => {}, folded).querySelector("pre.body").tabIndex;
        }))"""
    )
    assert stops == [-1, 0], stops


def test_a_long_message_scrolled_from_the_keyboard_keeps_the_focus_when_rebuilt(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """The focus on a long message's text (a Tab stop, to scroll it with the arrow keys),
    then a trim built every row again: the focus goes back to that text, not to its row,
    where the arrow keys scroll the page instead."""
    text = "\n".join(f"line {i}" for i in range(40))
    posted(console_proxy, "scrolled", [{"role": "user", "content": text}])
    page = sign_in(console, "#/s/scrolled")
    body = page.locator("[data-testid=message][data-role=user] pre.body").first
    body.wait_for()
    body.focus()
    assert body.evaluate("(b) => { window.held = b; return b === document.activeElement; }")
    inject(db_dsn, "scrolled", "context.trimmed", {"reason": "test"})
    wait_for(lambda: not page.evaluate("window.held.isConnected"), page)
    held = page.evaluate(
        "(() => { const a = document.activeElement;"
        " return [a.localName, a.className, a.closest('[data-pos]').dataset.role]; })()"
    )
    assert held == ["pre", "body", "user"], held
