"""The console against text a client chose: markup stored in a message, a tool call (its id,
name and arguments) and a role is shown as text, never run. The page builds its DOM with
``textContent`` only, and its CSP allows no inline script; this keeps it so. Text with no
place to break wraps inside its column instead of widening the page, and right-to-left text
reads right to left."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Model, briefing
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.settle import settled
from tests.integration.ui.test_console import api, inject, sign_in
from tests.integration.ui.test_console_audit import spills_over

pytestmark = pytest.mark.timeout(60)

MARKUP = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def _chat(proxy: ProxyServer, sid: str, messages: list[dict[str, Any]]) -> None:
    with api(proxy) as h:
        resp = h.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": messages},
            headers={"x-session-id": sid},
        )
        assert resp.status_code == 200, resp.text


def test_stored_markup_is_shown_as_text(console: Page, console_proxy: ProxyServer) -> None:
    call = {"id": MARKUP, "type": "function", "function": {"name": MARKUP, "arguments": MARKUP}}
    _chat(
        console_proxy,
        "markup",
        [
            {"role": "user", "content": MARKUP},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": MARKUP, "content": MARKUP},
            {"role": 'user" onmouseover="window.__pwned=3', "content": MARKUP},
        ],
    )
    page = sign_in(console, "#/s/markup")
    page.get_by_test_id("message").nth(3).wait_for()
    bodies = page.locator(".msg .body").all_inner_texts()
    assert bodies.count(MARKUP) >= 3
    page.get_by_test_id("message").nth(3).hover()
    settled(page)  # a handler the hover ran has run
    assert page.evaluate("window.__pwned") is None
    assert page.locator(".msg img, .msg script").count() == 0


def test_a_cut_result_whose_id_holds_a_slash_pages_back(
    console: Page, console_proxy: ProxyServer
) -> None:
    # The console quotes the id (encodeURIComponent: %2F); the server decodes it to a slash
    # before routing, so the route has to take an id of several segments.
    cid = "functions/read_file/0"
    call = {"id": cid, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    body = "".join(f"slash line {n:04d}\n" for n in range(400))
    _chat(
        console_proxy,
        "slashed",
        [
            {"role": "user", "content": "read it"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": cid, "content": body},
        ],
    )
    page = sign_in(console, "#/s/slashed")
    cut = page.get_by_test_id("message-list").locator(f'[data-tool-call-id="{cid}"]')
    cut.locator("[data-mark=truncated]").wait_for()
    cut.get_by_test_id("raw-page").click()
    cut.get_by_test_id("raw-output").filter(has_text="slash line 0000").wait_for()


def test_long_unbroken_text_wraps_in_its_column(console: Page, console_proxy: ProxyServer) -> None:
    # a client's text with no place to break: a tool call's arguments, its id, the model name
    blob, call_id, model = "A" * 3000, "c" * 300, "m" * 300
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "apply", "arguments": f'{{"patch":"{blob}"}}'},
    }
    with api(console_proxy) as h:
        resp = h.post(
            "/s/wide/v1/chat/completions",
            json={
                "model": model,
                "messages": [
                    {"role": "user", "content": "go"},
                    {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": call_id, "content": "ok"},
                ],
            },
        )
        assert resp.status_code == 200, resp.text
    page = sign_in(console, "#/s/wide")
    page.locator("[data-testid=message]").nth(3).wait_for()
    assert not spills_over(page)
    # in one go: a refresh (the turn's events) may replace the list between two looks
    wider = page.evaluate(
        """() => {
          const column = document.querySelector(".col-main").getBoundingClientRect();
          return [...document.querySelectorAll(".msg")]
            .filter((n) => n.getBoundingClientRect().right > column.right + 1).length;
        }"""
    )
    assert wider == 0


def test_a_toast_with_long_unbroken_text_stays_on_screen_and_closes(
    console: Page, console_proxy: ProxyServer
) -> None:
    page = sign_in(console)
    page.get_by_test_id("session-list").wait_for(state="attached")
    page.goto(f"{console.origin}/ui#/s/{'x' * 200}%2Fy")  # not an id: a toast quotes it
    toast = page.get_by_test_id("toast").filter(has_text="is not a session id")
    toast.wait_for()
    box = toast.bounding_box()
    assert box and box["x"] + box["width"] <= page.viewport_size["width"]
    toast.get_by_role("button", name="Close").click()  # within reach
    toast.wait_for(state="detached")


def test_long_unbroken_text_wraps_in_the_summary_and_the_memory_prompt(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    chatter = [
        m
        for i in range(6)
        for m in (
            {"role": "user", "content": f"Question {i} " * 25},
            {"role": "assistant", "content": f"Answer {i} " * 25},
        )
    ]
    fake_upstream.default = Model(brief=lambda _: briefing(f"- /src/{'p' * 400}.py"))
    _chat(console_proxy, "side", [*chatter, {"role": "user", "content": "go"}])
    with api(console_proxy) as h:
        assert h.post("/v1/sessions/side/compact").json()["compacted"]
    fact = f"https://example.com/{'q' * 300}"
    inject(db_dsn, "side", "memory.suggestion", {"suggestion_id": "s-long", "facts": [fact]})
    page = sign_in(console, "#/s/side")
    page.get_by_test_id("summary").locator("h3").first.wait_for()
    page.get_by_test_id("memory-prompt").wait_for()
    assert not spills_over(page)
    assert page.evaluate(
        """() => [...document.querySelectorAll("#summary, #memory-prompt")]
                   .every((n) => n.scrollWidth <= n.clientWidth)"""
    )


HEBREW = "שלום, מה שלומך היום?"
ARABIC = "مرحبا، كيف يمكنني المساعدة؟"


def _direction(locator: Any) -> str:
    """The computed direction of the element ``locator`` finds. A node the page replaces
    between the locator's resolving and the evaluation is detached and has no computed style
    (``""``): the locator is resolved again, a bounded number of times."""
    for _ in range(50):
        direction = str(locator.evaluate("(node) => getComputedStyle(node).direction"))
        if direction:
            return direction
        locator.page.wait_for_timeout(20)
    return ""


def test_right_to_left_text_reads_right_to_left(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """Each text takes the direction of its own first strong letter (``dir="auto"``): a
    Hebrew or Arabic message, reply, streaming reply or answer reads right to left on the
    left-to-right page, an English one beside it left to right."""
    fake_upstream.script(reply(ARABIC))
    _chat(console_proxy, "rtl", [{"role": "user", "content": HEBREW}])
    page = sign_in(console, "#/s/rtl")
    rows = page.get_by_test_id("message")
    rows.nth(1).wait_for()
    assert [_direction(rows.nth(i).locator(".body")) for i in (0, 1)] == ["rtl", "rtl"]
    inject(db_dsn, "rtl", "session.message.delta.appended", {"choice": 0, "delta": ARABIC})
    streaming = page.get_by_test_id("message-streaming").locator(".body")
    streaming.wait_for()
    assert _direction(streaming) == "rtl"
    fake_upstream.script(reply(ARABIC, chunks=3), reply("Fine, thanks."))
    page.get_by_test_id("composer-input").fill(HEBREW)
    assert _direction(page.get_by_test_id("composer-input")) == "rtl"
    page.get_by_test_id("composer-send").click()
    answer = page.locator("[data-testid=assistant-message][data-state=done]")
    answer.wait_for()
    assert _direction(answer) == "rtl"
    page.get_by_test_id("composer-input").fill("And in English?")
    page.get_by_test_id("composer-send").click()
    page.get_by_test_id("message-list").get_by_text("Fine, thanks.").wait_for()
    assert _direction(answer) == "ltr"
    assert _direction(rows.last.locator(".body")) == "ltr"


def test_right_to_left_text_reads_right_to_left_in_raw_outputs_the_summary_and_memory(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """The texts beside the messages take their own direction too: a cut result's raw output
    paged back, the summary's lines, a memory suggestion's facts."""
    call = {"id": "call_ar", "type": "function", "function": {"name": "cat", "arguments": "{}"}}
    chatter = [
        m
        for i in range(6)
        for m in (
            {"role": "user", "content": f"Question {i} " * 25},
            {"role": "assistant", "content": f"Answer {i} " * 25},
        )
    ]
    history = [
        *chatter,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_ar", "content": f"{ARABIC}\n" * 100},
    ]
    fake_upstream.default = Model(brief=lambda _: briefing(f"- {ARABIC}", objective=ARABIC))
    _chat(console_proxy, "rtl-side", history)
    with api(console_proxy) as h:
        assert h.post("/v1/sessions/rtl-side/compact").json()["compacted"]
    inject(db_dsn, "rtl-side", "memory.suggestion", {"suggestion_id": "s-rtl", "facts": [HEBREW]})
    page = sign_in(console, "#/s/rtl-side")
    summary = page.get_by_test_id("summary")
    summary.locator("h3").first.wait_for()
    summary.get_by_text(ARABIC).first.wait_for()
    # in one evaluation: a load redraws the summary, so a node found earlier may be gone
    directions = page.evaluate(
        """() => [...document.querySelectorAll("#summary h3, #summary section p")]
                   .map((n) => [n.textContent, getComputedStyle(n).direction])"""
    )
    assert directions[:2] == [["Objective", "ltr"], [ARABIC, "rtl"]], directions
    fact = page.get_by_test_id("memory-prompt").locator("li").first
    fact.wait_for()
    assert _direction(fact) == "rtl"
    cut = page.locator("[data-testid=message][data-tool-call-id=call_ar]")
    cut.get_by_test_id("raw-page").click()
    raw = cut.get_by_test_id("raw-output")
    raw.filter(has_text=ARABIC).wait_for()
    assert _direction(raw) == "rtl"
