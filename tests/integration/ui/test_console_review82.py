"""The console's audit fixes, reviewed: what they missed. A view that follows a working
agent drops its oldest rows, not the one the keyboard's focus or a selection is in; Open
with only spaces typed says an id is needed; a list read that failed shows none of the last
read's rows.

Each test fails on the console before its fix; the ``console`` fixture checks that the page
raised no error and asked no host but the proxy.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import ROOMY, Page
from tests.integration.ui.test_console import api, sign_in, tool_round
from tests.integration.ui.test_console_audit import started

pytestmark = [pytest.mark.timeout(60), ROOMY]


def _grows(proxy: ProxyServer, upstream: FakeUpstream, sid: str, first: list[Any]) -> None:
    """The agent sends ``first``, its reply, then 250 more rounds at once: past twice the
    window, the view following its end drops the oldest rows."""
    history = [*first, {"role": "assistant", "content": "ok"}]
    for i in range(250):
        history += [{"role": "user", "content": f"go {i}"}, {"role": "assistant", "content": "ok"}]
    history.append({"role": "user", "content": "and then?"})
    upstream.script(reply("the last reply"))
    with api(proxy) as h:
        resp = h.post(f"/s/{sid}/v1/chat/completions", json={"model": "m", "messages": history})
        assert resp.status_code == 200, resp.text


def _opened(console: Page, proxy: ProxyServer, upstream: FakeUpstream, sid: str) -> Any:
    first = tool_round(1, 32000)  # cut: its row has a raw-output button
    upstream.script(reply("ok"))
    with api(proxy) as h:
        resp = h.post(f"/s/{sid}/v1/chat/completions", json={"model": "m", "messages": first})
        assert resp.status_code == 200, resp.text
    page = sign_in(console, f"#/s/{sid}")
    page.get_by_test_id("raw-page").wait_for()
    return page, first


def test_the_rows_a_followed_view_drops_are_not_the_one_the_focus_is_in(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The focus on an old row's button (its raw output read from the keyboard) as the agent
    adds rows: that row went with the oldest, and the focus with it, to the page's body."""
    page, first = _opened(console, console_proxy, fake_upstream, "focused")
    page.get_by_test_id("raw-page").focus()
    _grows(console_proxy, fake_upstream, "focused", first)
    page.get_by_test_id("message-list").get_by_text("the last reply").wait_for()
    page.locator("#message-list:not([aria-busy])").wait_for()
    assert page.evaluate("document.activeElement.dataset.testid") == "raw-page"
    assert page.evaluate("document.activeElement.isConnected")
    rows = page.get_by_test_id("message-list").locator("[data-testid=message]")
    assert rows.first.get_attribute("data-pos") == "2"  # the rows before it went


def test_the_rows_a_followed_view_drops_are_not_the_ones_selected(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """Text selected in an old row (to copy it) as the agent adds rows: the row went, and the
    selection with it."""
    page, first = _opened(console, console_proxy, fake_upstream, "selected")
    page.evaluate(
        """() => {
        const row = document.querySelector("[data-testid=message]");
        getSelection().selectAllChildren(row);
    }"""
    )
    _grows(console_proxy, fake_upstream, "selected", first)
    page.get_by_test_id("message-list").get_by_text("the last reply").wait_for()
    page.locator("#message-list:not([aria-busy])").wait_for()
    assert page.evaluate("getSelection().anchorNode?.isConnected") is True
    assert page.evaluate("getSelection().toString()").strip() != ""


def test_open_with_only_spaces_typed_says_an_id_is_needed(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The field is required, which spaces satisfy: Open did nothing, unsaid, as it did with
    nothing typed before it was."""
    page = sign_in(console)
    page.get_by_test_id("session-list").wait_for(state="attached")
    field = page.get_by_test_id("new-session-id")
    field.fill("   ")
    page.get_by_test_id("new-session-open").click()
    assert field.evaluate("(n) => n.validationMessage") != ""
    assert page.evaluate("document.activeElement.id") == "new-session-id"


def test_a_filter_the_proxy_did_not_answer_shows_no_rows_of_the_last_one(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A filter read that failed left the last filter's rows (on a long list, its Show more
    too) under "Could not list the sessions" and Try again: rows the typed filter does not
    match, which Show more went on paging, as if they were its answer."""
    started(console_proxy, "earlier-list")
    page = sign_in(console)
    page.get_by_test_id("session-row").first.wait_for()
    page.route("**/v1/sessions?*", lambda route: route.abort())
    page.get_by_test_id("session-filter").fill("nothing-like-it")
    page.locator("#list-empty").filter(has_text="Could not list the sessions").wait_for()
    assert page.get_by_test_id("session-row").count() == 0
    assert page.get_by_test_id("sessions-more").is_hidden()
    page.unroute("**/v1/sessions?*")
    page.get_by_test_id("sessions-retry").click()
    page.locator("#list-empty").filter(has_text="No session matches").wait_for()
