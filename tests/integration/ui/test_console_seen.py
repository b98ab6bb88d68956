"""The console as a person sees and hears it: a sessions list the proxy could not answer, the
answer box a screen reader reads, the names of the usage meter and the confirm dialog, and a
narrow window with the memory prompt and a toast both up.

Each test fails on the console before its fix; the ``console`` fixture checks that the page
raised no error and asked no host but the proxy.
"""

from __future__ import annotations

import re

import pytest

from tests.fakes.replies import raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import ROOMY, Page
from tests.integration.ui.test_console import api, inject, sign_in, tool_round, wait_for
from tests.integration.ui.test_console_audit import started
from tests.integration.ui.test_console_long import WINDOW

pytestmark = [pytest.mark.timeout(60), ROOMY]


def test_a_list_the_proxy_did_not_answer_says_so_and_reads_again(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The proxy away (restarting) when the list is read: the list says so where its rows go,
    not only in a toast that leaves an empty table behind, and offers to read it again."""
    started(console_proxy, "listed")
    console.page.route("**/v1/sessions?*", lambda route: route.abort())
    page = sign_in(console)
    empty = page.locator("#list-empty")
    empty.filter(has_text="Could not list the sessions").wait_for()
    page.unroute("**/v1/sessions?*")  # the proxy is back
    page.get_by_role("button", name="Try again").click()
    page.get_by_test_id("session-row").first.wait_for()
    assert empty.is_hidden()


def test_the_answer_box_is_busy_while_it_streams(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The answer box is a live region whose whole text is set again at every delta: while
    it streams it says it is busy, so a screen reader reads the answer once, whole, rather
    than all of it again at each piece."""
    started(console_proxy, "spoken")
    fake_upstream.script(reply("one two three four five six", chunks=6))
    page = sign_in(console, "#/s/spoken")
    page.get_by_test_id("message").nth(1).wait_for()
    page.evaluate(
        """window.busyAt = [];
        new MutationObserver(() => window.busyAt.push(
          document.getElementById('assistant-message').getAttribute('aria-busy'))
        ).observe(document.getElementById('assistant-message'), {childList: true});"""
    )
    page.get_by_test_id("composer-input").fill("go on")
    page.get_by_test_id("composer-send").click()
    page.locator("#assistant-message[data-state=done]").wait_for()
    seen = page.evaluate("window.busyAt")
    assert seen and set(seen) == {"true"}
    assert page.get_by_test_id("assistant-message").get_attribute("aria-busy") is None


def test_the_usage_meter_the_message_list_and_the_confirm_dialog_have_names(
    console: Page, console_proxy: ProxyServer
) -> None:
    started(console_proxy, "named")
    page = sign_in(console, "#/s/named")
    page.get_by_test_id("message").nth(1).wait_for()
    assert page.get_by_role("meter", name="Context window used").count() == 1
    assert page.get_by_role("list", name="Messages", exact=True).count() == 1
    page.get_by_test_id("action-compact").click()
    dialog = page.get_by_role("dialog", name="Compact named now?", exact=False)
    dialog.wait_for()
    page.get_by_test_id("confirm-cancel").click()


def test_in_a_narrow_window_a_toast_is_not_hidden_under_the_memory_prompt(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    started(console_proxy, "narrow")
    inject(db_dsn, "narrow", "memory.suggestion", {"suggestion_id": "s-1", "facts": ["A", "B"]})
    console.page.set_viewport_size({"width": 375, "height": 700})
    page = sign_in(console, "#/s/narrow")
    prompt = page.get_by_test_id("memory-prompt")
    prompt.wait_for()
    page.evaluate("import('/ui/static/app.js').then((m) => m.toast('Could not do it', 'error'))")
    toast = page.get_by_test_id("toast").filter(has_text="Could not do it")
    toast.wait_for()
    a, b = prompt.bounding_box(), toast.bounding_box()
    assert a and b
    assert b["y"] + b["height"] <= a["y"] or a["y"] + a["height"] <= b["y"]  # one above the other
    assert b["x"] >= 0 and b["x"] + b["width"] <= 375  # and both in the window
    assert a["x"] >= 0 and a["x"] + a["width"] <= 375


def test_a_view_left_open_on_a_working_agent_keeps_a_window_of_rows(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The rows an agent adds while the view follows its tail are appended; past twice a
    window the oldest go ("load earlier" brings them back), so a page left open all day is
    not every row of the session, nor is what each whole reload of the window reads."""
    started(console_proxy, "working")
    page = sign_in(console, "#/s/working")
    rows = page.get_by_test_id("message-list").locator("[data-testid=message]")
    rows.nth(1).wait_for()
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    for i in range(450):
        history += [{"role": "user", "content": f"go {i}"}, {"role": "assistant", "content": "ok"}]
    history.append({"role": "user", "content": "and then?"})  # 903 rows, and the reply
    fake_upstream.script(reply("the last reply"))
    with api(console_proxy) as h:
        resp = h.post("/s/working/v1/chat/completions", json={"model": "m", "messages": history})
        assert resp.status_code == 200, resp.text
    page.get_by_test_id("message-list").get_by_text("the last reply").wait_for()
    # the rows may arrive in more than one batch (the history, then the reply), so the last
    # trim may have left up to twice a window; never all 904, and none before the first shown
    page.get_by_test_id("load-earlier").filter(has_text=re.compile(r"\(\d+ not shown\)")).wait_for()
    shown, first = rows.count(), int(rows.first.get_attribute("data-pos") or -1)
    assert WINDOW <= shown <= 2 * WINDOW and first + shown == 904, (first, shown)
    label = page.get_by_test_id("load-earlier").inner_text()
    assert f"({first} not shown)" in label, label


def test_why_the_key_is_asked_again_describes_the_key_field(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The reason shows in the page's header, far from the field the focus goes to: the field
    names it as its description, so a screen reader says why it asks, not only what."""
    from playwright.sync_api import expect

    page = console.page
    page.goto(f"{console.origin}/ui#/")
    page.get_by_test_id("login-key").fill("not-the-key")
    page.get_by_test_id("login-submit").click()
    field = page.get_by_test_id("login-key")
    expect(field).to_have_accessible_description(re.compile("unknown API key"))


def test_a_proxy_out_of_reach_is_said_in_the_consoles_words(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A request that reached nothing fails with the browser's words ("Failed to fetch" in
    chromium, others elsewhere), which name neither the proxy nor what to do."""
    console.page.route("**/v1/sessions?*", lambda route: route.abort())
    page = sign_in(console)
    page.locator("#list-empty").filter(has_text="the proxy could not be reached").wait_for()
    console.errors.clear()  # the aborted read's own console line


def test_paging_a_raw_output_to_its_end_from_the_keyboard_keeps_the_focus(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The last page read, the button says all is shown and takes no press: a disabled
    button gave the focus up to the page's body, the keyboard's place lost."""
    fake_upstream.script(reply("ok"))
    with api(console_proxy) as h:
        resp = h.post(
            "/s/paging/v1/chat/completions", json={"model": "m", "messages": tool_round(1, 32000)}
        )
        assert resp.status_code == 200, resp.text
    page = sign_in(console, "#/s/paging")
    button = page.get_by_test_id("raw-page")
    said = page.get_by_test_id("raw-status")
    button.focus()
    for _ in range(12):
        before = said.inner_text()  # read once: a read may end between two reads of it
        if "All shown" in before:
            break
        page.keyboard.press("Enter")
        wait_for(lambda: said.inner_text() not in (before, "Reading…"), page)  # noqa: B023
    assert "All shown" in said.inner_text()
    assert button.is_disabled()
    assert page.evaluate("document.activeElement.dataset.testid") == "raw-page"


def test_send_pressed_from_the_keyboard_keeps_the_focus(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """Send takes no second press while its message is on its way, yet keeps the focus: a
    disabled button gave it up to the page's body for the answer's whole length."""
    started(console_proxy, "pressed")
    fake_upstream.script(reply("one two three", chunks=3, chunk_delay=0.1))
    page = sign_in(console, "#/s/pressed")
    page.get_by_test_id("message").nth(1).wait_for()
    page.get_by_test_id("composer-input").fill("go on")
    page.get_by_test_id("composer-send").focus()
    page.keyboard.press("Enter")
    page.locator("#assistant-message[data-state=streaming]").wait_for()
    assert page.get_by_test_id("composer-send").is_disabled()  # no second message meanwhile
    assert page.evaluate("document.activeElement.dataset.testid") == "composer-send"
    page.locator("#assistant-message[data-state=done]").wait_for()
    assert page.get_by_test_id("composer-send").is_enabled()
    assert page.evaluate("document.activeElement.dataset.testid") == "composer-send"


def test_a_toast_stays_while_the_pointer_or_the_focus_is_on_it(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A toast goes after its time, but not from under the pointer reading it or the focus
    on its close button (twelve seconds is short to read an error by a screen reader)."""
    console.page.clock.install()
    page = sign_in(console)
    page.get_by_test_id("session-list").wait_for(state="attached")
    page.evaluate("import('/ui/static/app.js').then((m) => m.toast('Read me', 'error'))")
    toast = page.get_by_test_id("toast").filter(has_text="Read me")
    toast.hover()
    page.clock.run_for(13_000)
    assert toast.is_visible()
    toast.get_by_role("button", name="Close").focus()
    page.mouse.move(0, 0)
    page.clock.run_for(13_000)
    assert toast.is_visible()
    page.get_by_test_id("session-filter").focus()  # the focus and the pointer gone
    page.clock.run_for(13_000)
    assert toast.count() == 0


def test_answering_the_memory_prompt_from_the_keyboard_keeps_a_place(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """The prompt hidden under the focus gave it up to the page's body: the next suggestion
    takes it on its own Save, and the last one answered gives it to the composer."""
    started(console_proxy, "keyed-memory")
    inject(db_dsn, "keyed-memory", "memory.suggestion", {"suggestion_id": "s-1", "facts": ["A"]})
    inject(db_dsn, "keyed-memory", "memory.suggestion", {"suggestion_id": "s-2", "facts": ["B"]})
    page = sign_in(console, "#/s/keyed-memory")
    prompt = page.get_by_test_id("memory-prompt")
    prompt.filter(has_text="1 of 2 waiting").wait_for()
    page.get_by_test_id("memory-dismiss").focus()
    page.keyboard.press("Enter")
    prompt.locator("li", has_text="B").wait_for()
    focused = lambda: page.evaluate("document.activeElement.dataset.testid || ''")  # noqa: E731
    wait_for(lambda: focused() == "memory-dismiss", page)
    page.keyboard.press("Enter")
    prompt.wait_for(state="hidden")
    wait_for(lambda: focused() == "composer-input", page)


def test_open_with_no_session_id_says_one_is_needed(
    console: Page, console_proxy: ProxyServer
) -> None:
    page = sign_in(console)
    page.get_by_test_id("session-list").wait_for(state="attached")
    page.get_by_test_id("new-session-open").click()  # nothing typed: it did nothing, unsaid
    field = page.get_by_test_id("new-session-id")
    assert field.evaluate("(n) => n.validationMessage") != ""
    assert page.evaluate("document.activeElement.id") == "new-session-id"


def test_the_lists_last_activity_ages_while_the_list_is_open(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A list left open said "3 s ago" of a session hours after: its times age with it."""
    started(console_proxy, "aging")
    console.page.clock.install()
    page = sign_in(console)
    cell = page.get_by_test_id("session-row").first.locator("td").last
    cell.filter(has_text=" s ago").wait_for()
    page.clock.run_for(5 * 60_000)
    cell.filter(has_text="5 min ago").wait_for()


def test_an_answer_cut_off_mid_stream_says_so_after_its_toast_has_gone(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The provider failed halfway: the text that came stays in the answer box, which looked
    like a whole answer once the toast saying otherwise had gone."""
    started(console_proxy, "cut-off")
    fake_upstream.script(
        raw(
            'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
            '"choices":[{"index":0,"delta":{"role":"assistant","content":"Half"},'
            '"finish_reason":null}]}\n\n',
            'data: {"error":{"message":"overloaded","type":"server_error","code":null}}\n\n',
        )
    )
    page = sign_in(console, "#/s/cut-off")
    page.get_by_test_id("message").nth(1).wait_for()
    page.get_by_test_id("composer-input").fill("go on")
    page.get_by_test_id("composer-send").click()
    box = page.locator("[data-testid=assistant-message][data-state=failed]")
    box.wait_for()
    after = box.evaluate("(n) => getComputedStyle(n, '::after').content")
    assert "not answered in full" in after


def test_change_key_is_offered_only_to_a_page_signed_in(
    console: Page, console_proxy: ProxyServer
) -> None:
    page = console.page
    page.goto(f"{console.origin}/ui#/")
    page.get_by_test_id("login-key").wait_for()
    change = page.get_by_role("button", name="Change key")
    assert change.is_hidden()  # the sign-in view is where a key is changed
    sign_in(console)
    change.wait_for()


def test_a_filter_that_matches_nothing_is_said_to_a_screen_reader(
    console: Page, console_proxy: ProxyServer
) -> None:
    """Typing in the filter, the focus stays in it: that nothing matches is a live status, not
    only a line under the table the reader's focus never reaches."""
    started(console_proxy, "only-one")
    page = sign_in(console)
    page.get_by_test_id("session-row").first.wait_for()
    page.get_by_test_id("session-filter").fill("zzz")
    page.get_by_role("status").filter(has_text='No session matches "zzz"').wait_for()
