"""After a change of view the console moves the focus to the new view's heading, and the
memory prompt is announced: the focus was left on the page's body (a keyboard started over
at the top, a screen reader said nothing of the new view), and the prompt appeared in a
corner no screen reader mentioned."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import KEY, Page
from tests.integration.ui.test_console import api, inject, sign_in

pytestmark = pytest.mark.timeout(60)


def _focused(page: Any) -> str:
    return str(page.evaluate("document.activeElement.id"))


def _chat(proxy: ProxyServer, session_id: str) -> None:
    with api(proxy) as h:
        resp = h.post(
            f"/s/{session_id}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert resp.status_code == 200, resp.text


def test_signing_in_focuses_the_lists_heading(console: Page) -> None:
    page = console.page
    page.goto(f"{console.origin}/ui#/")
    assert _focused(page) == "login-key"
    page.get_by_test_id("login-key").fill(KEY)
    page.get_by_test_id("login-key").press("Enter")
    heading = page.get_by_role("heading", name="Sessions", level=1)
    heading.wait_for()
    assert _focused(page) == "list-title"
    assert heading.get_attribute("tabindex") == "-1"  # focusable, yet no stop of the Tab key


def test_opening_a_session_from_the_list_focuses_its_heading(
    console: Page, console_proxy: ProxyServer
) -> None:
    _chat(console_proxy, "focused")
    page = sign_in(console)
    page.get_by_role("link", name="focused").click()
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    assert _focused(page) == "session-title"
    assert page.evaluate("document.activeElement.textContent") == "focused"


def test_leaving_a_session_for_the_list_focuses_the_lists_heading(
    console: Page, console_proxy: ProxyServer
) -> None:
    _chat(console_proxy, "left")
    page = sign_in(console, "#/s/left")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    page.get_by_role("link", name="Cascade").click()
    page.get_by_test_id("session-row").first.wait_for()
    assert _focused(page) == "list-title"


def test_the_memory_prompt_is_a_named_region_a_live_region_announces(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    _chat(console_proxy, "told")
    page = sign_in(console, "#/s/told")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    announce = page.get_by_test_id("memory-announce")
    assert announce.get_attribute("role") == "status"
    assert announce.get_attribute("aria-live") == "polite"
    assert announce.text_content() == ""
    inject(db_dsn, "told", "memory.suggestion", {"suggestion_id": "a11y", "facts": ["Uses uv"]})
    page.get_by_role("region", name="Remember this thing?").wait_for()
    assert "Remember this thing? Uses uv." in (announce.text_content() or "")
    page.get_by_test_id("memory-dismiss").click()
    page.get_by_test_id("memory-prompt").wait_for(state="hidden")
    assert announce.text_content() == ""


def test_the_first_view_of_a_load_focuses_its_heading(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A page loaded on a view (the key already stored: a reload, a link) lands the focus on
    that view's heading, as a change of view does: it was left on the body, the keyboard at
    the page's header and a screen reader naming no view. From a session's heading the first
    Tab press is its skip link."""
    _chat(console_proxy, "landed")
    page = sign_in(console)
    page.get_by_test_id("session-row").first.wait_for()
    page.reload()
    page.get_by_test_id("session-row").first.wait_for()
    assert _focused(page) == "list-title"
    page.goto(f"{console.origin}/ui#/s/landed")
    page.reload()
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    assert _focused(page) == "session-title"
    assert page.evaluate("document.activeElement.textContent") == "landed"
    page.keyboard.press("Tab")
    assert _focused(page) == "skip-to-composer"
