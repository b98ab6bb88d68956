"""The console's rough edges, as a user and a screen-reader user meet them: a session view
whose first load failed reads it again by itself; each raw-output button is named by its
result; a large spill pages back in presses a reader gets through; a failed list read is said
once; Change key never shows on the sign-in view.

Each test fails on the console before its fix; the ``console`` fixture checks that the page
raised no error and asked no host but the proxy.
"""

from __future__ import annotations

import json
import re
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


def test_a_session_whose_first_load_failed_reads_it_again_by_itself(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The session read fails (a 503) while its event stream is healthy: the stream's replay
    and keepalives bring no event that loads it, so the view tries again itself, as the list
    offers Try again, and shows the session once the proxy answers, with no reload."""
    started(console_proxy, "flaky")
    failing = {"on": True, "tries": 0}

    def session(route: Any) -> None:
        if failing["on"]:
            failing["tries"] += 1
            route.fulfill(status=503, json={"error": {"message": "restarting"}})
        else:
            route.continue_()

    console.page.route("**/v1/sessions/flaky", session)
    page = sign_in(console, "#/s/flaky")
    wait_for(lambda: any("/v1/sessions/flaky/events" in u for u in console.urls), page)
    # the stream is open and has replayed: no event is to come
    page.locator("#session-view[data-stream=live]").wait_for(state="attached")
    failing["on"] = False
    page.get_by_test_id("usage-text").filter(has_text="tokens").wait_for(timeout=12_000)
    assert "agent" in page.locator("#session-meta").inner_text()
    wait_for(lambda: page.get_by_test_id("toast").count() == 0, page)  # the failure's toast goes
    console.errors.clear()  # the 503s' own console lines


def test_each_raw_output_button_is_named_by_its_result(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """Two cut results: a screen reader's list of buttons tells their raw-output buttons
    apart by the tool and the call, not two alike "Show the raw output"; the name keeps the
    button's visible words first, and stays as it pages (test_console_outage)."""
    fake_upstream.script(reply("ok"))
    posted(console_proxy, "named", [*tool_round(1, 5000), *tool_round(2, 5000)])
    page = sign_in(console, "#/s/named")
    first, second = (
        page.get_by_role("button", name=re.compile(rf"^Show the raw output .*read_file.*{c}"))
        for c in ("call_1", "call_2")
    )
    first.wait_for()
    assert first.count() == 1 and second.count() == 1
    first.click()
    page.get_by_test_id("raw-status").filter(has_text="All shown").wait_for()
    assert first.count() == 1


def test_a_large_spill_pages_back_far_more_than_the_models_page_a_press(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The proxy's page is the model's (``maxChars``, 1,500 here): a reader of a 60,000-character
    spill got under 1,500 characters a press. A press now reads pages on to 50,000 more
    characters, and the next press the rest."""
    fake_upstream.script(reply("ok"))
    round_ = tool_round(1, 70_000)
    body = round_[2]["content"]
    size = len(body)  # 59,517: the lines are shorter than the 20 characters tool_round counts
    posted(console_proxy, "big", round_)
    page = sign_in(console, "#/s/big")
    cut = page.get_by_test_id("message-list").locator("[data-tool-call-id=call_1]")
    button = cut.get_by_test_id("raw-page")
    said = cut.get_by_test_id("raw-status")
    button.click()
    said.filter(has_text="press again for the next page").wait_for()
    raw = cut.get_by_test_id("raw-output")
    assert 50_000 <= len(raw.text_content() or "") < size
    assert f"of {size:,} characters shown" in said.inner_text()
    button.click()
    said.filter(has_text="All shown").wait_for()
    assert raw.text_content() == body


def test_a_list_the_proxy_did_not_answer_is_said_once(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The list's own place says the read failed (a live status, with Try again); a toast, an
    alert, saying the same words made a screen reader read them twice."""
    console.page.route("**/v1/sessions?*", lambda route: route.abort())
    page = sign_in(console)
    page.locator("#list-empty").filter(has_text="Could not list the sessions").wait_for()
    settled(page)  # a toast raised with it has its text (a frame after its box)
    said = page.evaluate(
        """() => [...document.querySelectorAll('[role=alert], [role=status], [aria-live]')]
             .filter((n) => !n.parentElement.closest('[role=alert], [role=status], [aria-live]'))
             .filter((n) => !n.hidden && n.textContent.includes('Could not list the sessions'))
             .length"""
    )
    assert said == 1
    console.errors.clear()  # the aborted read's own console line


def test_change_key_never_shows_on_the_sign_in_view(
    console: Page, console_proxy: ProxyServer
) -> None:
    """Before the script runs (a slow network, a module still loading) the page is the markup
    alone: Change key is hidden in it, not hidden by the script a moment later."""
    page = console.page
    page.route("**/ui/static/app.js", lambda route: route.abort())
    page.goto(f"{console.origin}/ui#/")
    assert page.locator("#forget-key").is_hidden()
    console.errors.clear()  # the aborted module's own console line


def test_a_long_tool_call_scrolls_in_its_box_as_a_long_body_does(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """A real agent's Write or Edit call carries a whole file in its arguments (19,000
    characters in a shared transcript): its line under the message grew the row to over
    2,000 pixels, a screen and more of one call, where a long body scrolls in a box."""
    content = "".join(f"line {n}: some code here\n" for n in range(800))
    call = {
        "id": "call_w",
        "type": "function",
        "function": {
            "name": "Write",
            "arguments": json.dumps({"path": "a.py", "content": content}),
        },
    }
    fake_upstream.script(reply("ok"))
    posted(
        console_proxy,
        "writes",
        [
            {"role": "user", "content": "write it"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_w", "content": "written"},
        ],
    )
    page = sign_in(console, "#/s/writes")
    shown = page.locator("code.call").filter(has_text="Write(")
    shown.wait_for()
    box = shown.evaluate("(n) => [n.clientHeight, n.scrollHeight, getComputedStyle(n).overflowY]")
    body = page.locator("pre.body").first.evaluate(
        "(n) => parseFloat(getComputedStyle(n).maxHeight)"
    )
    assert box[0] <= body < box[1], box  # as tall as a body at most, the rest scrolled to
    assert box[2] == "auto"
