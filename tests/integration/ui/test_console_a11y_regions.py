"""What a screen reader is told by the session view's regions: each live region says its text
once (none inside another, which makes a reader announce it twice), the usage meter says
what its text line shows, and the memory prompt goes on Escape, leaving the focus where it
came from.

The ``console`` fixture checks that the page raised no error and asked no host but the proxy.
"""

from __future__ import annotations

import re

import pytest

from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import api, inject, posted, sign_in

pytestmark = pytest.mark.timeout(60)

# every live region (an aria-live other than off, or a role that is one) inside another
_NESTED = """() => {
  const LIVE = "[aria-live]:not([aria-live=off]), [role=status], [role=alert], [role=log]," +
    " [role=marquee], [role=timer]";
  return [...document.querySelectorAll(LIVE)]
    .filter((n) => n.parentElement && n.parentElement.closest(LIVE))
    .map((n) => `${n.parentElement.closest(LIVE).id} > ${n.id || n.dataset.testid || n.tagName}`);
}"""


def test_no_live_region_sits_inside_another(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """With a toast (a handoff nudge: role=status), the memory prompt and its announcement
    shown, no live region is inside another: the toasts' box was one around each toast."""
    posted(console_proxy, "regions", [{"role": "user", "content": "hi"}])
    page = sign_in(console, "#/s/regions")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    inject(db_dsn, "regions", "context.handoff_suggested", {"fraction": 0.61})
    inject(db_dsn, "regions", "memory.suggestion", {"suggestion_id": "r-1", "facts": ["A fact"]})
    page.get_by_test_id("toast").filter(has_text="61%").wait_for()
    page.get_by_test_id("memory-prompt").filter(has_text="A fact").wait_for()
    assert page.evaluate(_NESTED) == []


def test_the_usage_meter_says_what_its_text_shows(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The meter's aria-valuetext is the share and the counts its text line shows, not a bare
    number of tokens; a session not started says it has no usage yet."""
    posted(console_proxy, "metered", [{"role": "user", "content": "hi " * 200}])
    page = sign_in(console, "#/s/metered")
    text = page.get_by_test_id("usage-text")
    text.filter(has_text="tokens").wait_for()
    shown = re.match(r"([\d,]+) / ([\d,]+) tokens \(([\d.]+)%\)", text.inner_text())
    assert shown, text.inner_text()
    used, limit, share = shown.groups()
    bar = page.get_by_test_id("usage-bar")
    assert bar.get_attribute("aria-valuetext") == (
        f"{share}% of the window, {used} of {limit} tokens"
    )
    page.goto(f"{console.origin}/ui#/s/never-started")
    text.filter(has_text="No usage yet").wait_for()
    assert bar.get_attribute("aria-valuetext") == "No usage yet"


def test_escape_puts_the_memory_prompt_away_and_the_focus_back(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """Escape in the prompt hides it, unanswered (the suggestion still waits), and the focus
    goes back where it came from into the prompt (here the composer), not to the page's body."""
    posted(console_proxy, "remember", [{"role": "user", "content": "hi"}])
    page = sign_in(console, "#/s/remember")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    inject(db_dsn, "remember", "memory.suggestion", {"suggestion_id": "e-1", "facts": ["Esc"]})
    prompt = page.get_by_test_id("memory-prompt")
    prompt.filter(has_text="Esc").wait_for()
    page.get_by_test_id("composer-input").focus()
    page.get_by_test_id("memory-dismiss").focus()  # as Tab takes it there
    page.keyboard.press("Escape")
    prompt.wait_for(state="hidden")
    assert page.evaluate("document.activeElement.dataset.testid") == "composer-input"
    assert page.get_by_test_id("memory-announce").text_content() == ""
    with api(console_proxy) as h:
        waiting = h.get("/v1/memory/suggestions", params={"session_id": "remember"}).json()
    assert [s.get("suggestion_id") or s.get("id") for s in waiting["data"]] == ["e-1"]
