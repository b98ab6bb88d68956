"""The console from the keyboard alone: the focus is kept when what holds it goes (a toast
closed, a row built again by a live event, the confirm dialog closed with Escape), and a box
of text that scrolls can be reached to scroll.

The ``console`` fixture checks that the page raised no error and asked no host but the proxy.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import inject, posted, sign_in, tool_round, wait_for
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)


def _active(page: Any) -> str:
    return str(page.evaluate("document.activeElement.dataset.testid || document.activeElement.id"))


def test_a_toast_closed_from_the_keyboard_gives_the_focus_back(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """Its close button pressed with Enter: the toast went with the focus, which fell to the
    page's body. It goes back to where the keyboard came from. The button's focus ring was the
    browser's own, faint on the toast's dark ground."""
    started(console_proxy, "nudge")
    page = sign_in(console, "#/s/nudge")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    inject(db_dsn, "nudge", "context.handoff_suggested", {"fraction": 0.9})
    toast = page.get_by_test_id("toast").filter(has_text="handing off")
    toast.wait_for()
    page.get_by_test_id("composer-send").focus()
    for _ in range(10):  # Tab on from the composer's last control to the toast's button
        if toast.locator("button").evaluate("(b) => b === document.activeElement"):
            break
        page.keyboard.press("Tab")
    # the keyboard's place is drawn, in white on the toast's dark ground
    ring = toast.locator("button").evaluate(
        "(b) => [getComputedStyle(b).outlineStyle, getComputedStyle(b).outlineColor]"
    )
    assert ring == ["solid", "rgb(255, 255, 255)"], ring
    page.keyboard.press("Enter")
    toast.wait_for(state="detached")
    wait_for(lambda: _active(page) == "composer-send", page)


def test_a_row_built_again_by_a_live_event_keeps_the_focus_on_its_button(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """A raw output's button pressed from the keyboard, then a trim (a live event that reads
    the whole window again) built every row again: the focus fell to the page's body."""
    fake_upstream.script(reply("ok"))
    posted(console_proxy, "rebuilt", tool_round(1, 5000))
    page = sign_in(console, "#/s/rebuilt")
    row = page.get_by_test_id("message-list").locator("[data-tool-call-id=call_1]")
    button = row.get_by_test_id("raw-page")
    button.focus()
    page.keyboard.press("Enter")
    row.get_by_test_id("raw-status").filter(has_text="All shown").wait_for()
    button.evaluate("(b) => { window.held = b; }")
    inject(db_dsn, "rebuilt", "context.trimmed", {"reason": "test"})
    wait_for(lambda: not page.evaluate("window.held.isConnected"), page)
    assert _active(page) == "raw-page"
    assert page.evaluate("document.activeElement.closest('[data-tool-call-id]').dataset.toolCallId")
    assert row.get_by_test_id("raw-output").evaluate("(p) => p.tabIndex") == 0  # it scrolls


def test_the_confirm_dialog_closed_with_escape_gives_the_focus_back(
    console: Page, console_proxy: ProxyServer
) -> None:
    started(console_proxy, "asked")
    page = sign_in(console, "#/s/asked")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    page.get_by_test_id("action-reset").focus()
    page.keyboard.press("Enter")
    page.get_by_test_id("confirm").wait_for()
    assert page.evaluate("document.getElementById('confirm').contains(document.activeElement)")
    page.keyboard.press("Escape")
    page.get_by_test_id("confirm").wait_for(state="hidden")
    wait_for(lambda: _active(page) == "action-reset", page)
    page.keyboard.press("Space")  # and the same action is pressed again from there
    page.get_by_test_id("confirm").wait_for()
    page.keyboard.press("Escape")
    page.get_by_test_id("confirm").wait_for(state="hidden")
