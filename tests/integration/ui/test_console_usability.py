"""The console past its happy path, as a person uses it: long answers (in the answer box, and
another client's streaming in the list), a proxy that goes away for a while (a restart), a key
pasted with a character no header can carry, thousands of sessions, the keyboard, a second
tab, leaving a view mid-answer, a draft, a double click, the memory prompt in its corner.

Each test fails on the console before its fix; the ``console`` fixture checks that the page
raised no error and asked no host but the proxy.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import KEY, Page
from tests.integration.ui.settle import count_shown, settled, shown
from tests.integration.ui.test_console import api, inject, sign_in, tool_round, wait_for
from tests.integration.ui.test_console_audit import spills_over, started
from tests.integration.ui.test_console_streaming import open_watching, stream_chat

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def thread() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    """A streaming client's thread: sync Playwright keeps an event loop on this one."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        yield pool


def _answered(console: Page, proxy: ProxyServer, fake: FakeUpstream, sid: str, text: str) -> None:
    started(proxy, sid)
    fake.script(reply(text))
    page = sign_in(console, f"#/s/{sid}")
    page.get_by_test_id("message").nth(1).wait_for()
    page.get_by_test_id("composer-input").fill("go on")
    page.get_by_test_id("composer-send").click()
    page.locator("#assistant-message[data-state=done]").wait_for()


def test_a_long_unbroken_answer_wraps_in_the_answer_box(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # a model's answer with no place to break: a hash, a base64 blob, a long URL
    _answered(console, console_proxy, fake_upstream, "blob", "QUJD" * 1000)
    assert not spills_over(console.page)


def test_a_long_answer_is_a_box_of_its_own_that_shows_its_newest_lines(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """A long answer streams into a box as tall as a message's, scrolled to its newest
    lines as they come; its whole height pushed the message list thousands of pixels above
    the composer, and the stored reply shows in full in the list all the same."""
    text = "".join(f"line {n} of a long answer\n" for n in range(1500))
    _answered(console, console_proxy, fake_upstream, "tall", text)
    box = console.page.evaluate(
        """(() => { const a = document.getElementById("assistant-message");
          return [a.getBoundingClientRect().height, a.scrollHeight - a.scrollTop - a.clientHeight,
            window.innerHeight]; })()"""
    )
    height, below, window = box
    assert height < window / 2
    assert below < 2  # the newest lines are in sight


def test_the_warning_of_a_lost_stream_stays_until_it_is_back(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A proxy down for a while (a restart, a deploy): the warning that the live updates
    stopped stays while the page reconnects, however long that takes; it went with an error
    toast's 12 s, and the page then looked live while it showed nothing new. The page's
    clock is run forward through the reconnection's pauses."""
    started(console_proxy, "away")
    down = {"on": True}
    refused: list[str] = []

    def events(route: Any) -> None:
        if down["on"]:
            refused.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    console.page.route("**/v1/sessions/away/events", events)
    console.page.clock.install()
    page = sign_in(console, "#/s/away")
    lost = page.get_by_test_id("toast").filter(has_text="live updates stopped")
    lost.wait_for()
    count_shown(page, "lost", "[data-testid=toast]", "live updates stopped")

    def tried_on() -> bool:  # a second on at a time: each try is armed once the last failed
        page.clock.run_for(1_000)
        return len(refused) >= 6

    wait_for(tried_on, page)  # the first try and those at 1, 2, 4, 8, 16 s: all refused
    settled(page, frames=False)  # the last refusal heard
    assert lost.count() == 1
    down["on"] = False  # the proxy is back
    page.clock.run_for(30_000)
    page.get_by_test_id("toast").filter(has_text="Live updates are back").wait_for()
    assert lost.count() == 0
    assert shown(page, "lost") == 1  # the one warning, never said again meanwhile


def test_a_key_no_header_can_carry_is_said_at_the_sign_in(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A key pasted with an invisible character (a zero-width space from a chat or a
    document) cannot go in the Authorization header: the sign-in says so and asks again,
    where the page took it and every call failed with the browser's words about headers."""
    page = console.page
    page.goto(f"{console.origin}/ui#/")
    page.get_by_test_id("login-key").fill(KEY + "\u200b")
    page.get_by_test_id("login-submit").click()
    page.locator("#where").filter(has_text="U+200B").wait_for()
    assert page.locator("#login").is_visible()
    assert page.evaluate("document.activeElement.id") == "login-key"
    assert page.get_by_test_id("toast").count() == 0
    page.get_by_test_id("login-key").fill(KEY)  # pasted again, cleanly
    page.get_by_test_id("login-submit").click()
    page.get_by_test_id("session-list").wait_for(state="attached")
    assert page.locator("#where").inner_text() == ""


def test_each_session_of_the_list_is_one_keyboard_stop(
    console: Page, console_proxy: ProxyServer
) -> None:
    """From the keyboard a session is one Tab press, its link, which Enter opens; its row
    was a stop of its own too, so a list took twice the presses to cross."""
    started(console_proxy, "tab-a")
    started(console_proxy, "tab-b")
    page = sign_in(console)
    page.get_by_test_id("session-row").nth(1).wait_for()
    page.get_by_test_id("new-session-open").focus()
    stops = []
    for _ in range(2):
        page.keyboard.press("Tab")
        stops.append(
            page.evaluate(
                "(() => { const row = document.activeElement.closest('[data-session-id]');"
                " return row && row.dataset.sessionId; })()"
            )
        )
    assert stops == ["tab-b", "tab-a"]  # the latest activity first
    page.keyboard.press("Enter")
    page.locator("#session-title").filter(has_text="tab-a").wait_for()


def test_a_long_reply_streaming_in_the_list_shows_its_newest_lines(
    console: Page,
    console_proxy: ProxyServer,
    fake_upstream: FakeUpstream,
    thread: concurrent.futures.ThreadPoolExecutor,
) -> None:
    """Another client's reply streaming in the list is a bounded box: it follows its newest
    lines while it shows its end, and stays put once the reader scrolls up in it. It was
    built again at each delta, scrolled to its top, so a long reply showed only its start."""
    started(console_proxy, "follow")
    page = open_watching(console, "follow")
    pacer = Pacer()
    text = "".join(f"line {n} of another client's answer\n" for n in range(600))
    fake_upstream.script(reply(text, chunks=6, pacer=pacer))
    client = thread.submit(stream_chat, console_proxy.origin, "follow")
    body = page.get_by_test_id("message-streaming").locator("pre.body")
    place = """(pre) => [pre.textContent.length, pre.scrollTop,
        pre.scrollHeight - pre.scrollTop - pre.clientHeight]"""

    def grown(frames: int, past: int) -> tuple[int, int, int]:
        pacer.allow(frames)
        wait_for(lambda: body.count() == 1 and body.evaluate(place)[0] > past, page)
        return tuple(body.evaluate(place))  # type: ignore[return-value]

    shown, _, below = grown(2, 0)
    assert below < 2  # the newest line in sight
    shown, _, below = grown(1, shown)
    assert below < 2  # and again after the next delta
    body.evaluate("(pre) => { pre.scrollTop = 0; }")  # the reader scrolls up in it
    shown, top, _ = grown(1, shown)
    assert top == 0
    pacer.allow(20)
    assert client.result(timeout=10) == text


def test_a_session_opened_in_a_new_tab_leaves_the_list_where_it_is(
    console: Page, console_proxy: ProxyServer
) -> None:
    """Ctrl+click on a session's link opens it in a new tab, as a link does; the click also
    reached its row, which opened the session in this tab too."""
    started(console_proxy, "aside")
    page = sign_in(console)
    link = page.get_by_test_id("session-row").get_by_role("link", name="aside")
    with page.context.expect_page() as opened:
        link.click(modifiers=["Control"])
    assert opened.value.url.endswith("/ui#/s/aside")
    opened.value.close()
    # a frame drawn and the tasks queued before it run: a hashchange the click queued is in
    page.evaluate("new Promise((r) => requestAnimationFrame(() => setTimeout(r)))")
    assert page.evaluate("location.hash") == "#/"
    assert page.locator("#list-view").is_visible()


def sent_then_listed(
    console: Page, session_id: str, pacer: Pacer, question: str, seen: str, chunks: int
) -> Page:
    """``question`` sent in ``session_id``'s view, ``chunks`` of the paced answer let through
    until ``seen`` shows, then a look at the sessions list while the answer waits."""
    page = sign_in(console, f"#/s/{session_id}")
    page.get_by_test_id("message").nth(1).wait_for()
    page.get_by_test_id("composer-input").fill(question)
    page.get_by_test_id("composer-send").click()
    pacer.allow(chunks)
    page.get_by_test_id("assistant-message").filter(has_text=seen).wait_for()
    page.locator(".brand").click()  # a look at the list: the turn's view is closed
    page.get_by_test_id("session-row").first.wait_for()
    return page


def test_an_answer_goes_on_to_its_end_when_the_view_is_left(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """A person who looks at the sessions list while the agent answers finds the answer
    stored when they come back: leaving the view cut the request, and the session kept the
    question with no reply (the model's work lost). Nothing of it shows in the list meanwhile."""
    started(console_proxy, "peek")
    pacer = Pacer()
    fake_upstream.script(reply("an answer worth keeping " * 8, chunks=8, pacer=pacer))
    page = sent_then_listed(console, "peek", pacer, "tell me", "worth", chunks=2)
    pacer.allow(20)
    with api(console_proxy) as h:
        wait_for(lambda: len(h.get("/v1/sessions/peek/messages").json()["data"]) == 4, page)
        last = h.get("/v1/sessions/peek/messages").json()["data"][-1]
    assert last["role"] == "assistant"
    assert last["message"]["content"] == "an answer worth keeping " * 8
    page.go_back()
    page.get_by_test_id("message").nth(3).wait_for()
    assert page.get_by_test_id("composer-send").is_enabled()
    assert page.get_by_test_id("composer-input").input_value() == ""  # sent: no draft


def test_a_draft_stays_with_its_session(console: Page, console_proxy: ProxyServer) -> None:
    """What is typed and not sent is the session's: opening another showed it in that one's
    composer (one element for every view), a Ctrl+Enter from sending it to the wrong
    session. It is there again when its own session is opened again."""
    started(console_proxy, "draft-a")
    started(console_proxy, "draft-b")
    page = sign_in(console, "#/s/draft-a")
    page.get_by_test_id("message").nth(1).wait_for()
    box = page.get_by_test_id("composer-input")
    box.fill("meant for draft-a only")
    page.goto(f"{console.origin}/ui#/s/draft-b")
    page.locator("#session-title").filter(has_text="draft-b").wait_for()
    assert box.input_value() == ""
    page.go_back()
    page.locator("#session-title").filter(has_text="draft-a").wait_for()
    assert box.input_value() == "meant for draft-a only"


def test_the_tab_is_named_after_its_view(console: Page, console_proxy: ProxyServer) -> None:
    """Two tabs, or the browser's history, tell the sessions apart by their titles: every
    view was 'Cascade console'."""
    started(console_proxy, "titled")
    page = console.page
    page.goto(f"{console.origin}/ui#/s/titled")
    assert page.title() == "Sign in · Cascade console"
    page.get_by_test_id("login-key").fill(KEY)
    page.get_by_test_id("login-submit").click()
    page.get_by_test_id("message").first.wait_for()
    assert page.title() == "titled · Cascade console"
    page.locator(".brand").click()
    page.get_by_test_id("session-row").first.wait_for()
    assert page.title() == "Sessions · Cascade console"


def test_a_failure_said_again_is_one_toast(console: Page, console_proxy: ProxyServer) -> None:
    """A proxy that is away fails every try the same way: the toast already saying so stays
    the one, where each try stacked another until they covered the page."""
    started(console_proxy, "again")
    console.page.route("**/s/again/v1/chat/completions", lambda route: route.abort())
    page = sign_in(console, "#/s/again")
    page.get_by_test_id("message").nth(1).wait_for()
    failed = page.locator("#assistant-message[data-state=failed]")
    for n in range(3):
        page.get_by_test_id("composer-input").fill(f"try {n}")
        page.get_by_test_id("composer-send").click()
        failed.wait_for(state="attached")
        page.evaluate("document.getElementById('assistant-message').dataset.state = ''")
    assert page.get_by_test_id("toast").filter(has_text="not answered").count() == 1


def test_a_double_click_on_save_saves_once(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """A double click (or a second press while the first is answered) on Save asked the
    proxy to accept the suggestion twice, and the second refusal was an error toast."""
    started(console_proxy, "twice")
    inject(db_dsn, "twice", "memory.suggestion", {"suggestion_id": "s-twice", "facts": ["A"]})
    page = sign_in(console, "#/s/twice")
    prompt = page.get_by_test_id("memory-prompt")
    prompt.locator("li", has_text="A").wait_for()
    page.get_by_test_id("memory-save").dblclick()
    prompt.wait_for(state="hidden")
    # a second accept would have gone as the second click landed, before the first answer
    page.get_by_test_id("toast").filter(has_text="Saved").wait_for()
    accepts = [u for u in console.urls if u.endswith("/s-twice/accept")]
    assert len(accepts) == 1, accepts
    assert page.get_by_test_id("toast").filter(has_text="Could not").count() == 0


_OVERLAP = """(() => {
  const a = document.getElementById("composer-input").getBoundingClientRect();
  const b = document.getElementById("memory-prompt").getBoundingClientRect();
  return a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
})()"""


def test_the_memory_prompt_leaves_the_composer_in_sight(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """The prompt sits in the window's corner; the page scrolled to its end puts the
    composer above it, where it was under it, its start hidden while one types. Rows
    coming in while the page follows its end keep it there: the view scrolled the
    composer to the window's bottom edge, under the prompt."""
    with api(console_proxy) as h:  # a list taller than the window
        history = [m for i in range(8) for m in tool_round(i, 600)]
        resp = h.post("/s/corner/v1/chat/completions", json={"model": "m", "messages": history})
        assert resp.status_code == 200, resp.text
    facts = {"suggestion_id": "s-corner", "facts": [f"fact {n}" for n in range(6)]}
    inject(db_dsn, "corner", "memory.suggestion", facts)
    page = sign_in(console, "#/s/corner")
    page.get_by_test_id("memory-prompt").locator("li", has_text="fact 5").wait_for()
    page.get_by_test_id("message").nth(23).wait_for()  # the rows: 8 rounds of 3
    assert page.evaluate("document.scrollingElement.scrollHeight > window.innerHeight")
    page.evaluate("window.scrollTo(0, document.scrollingElement.scrollHeight)")
    assert not page.evaluate(_OVERLAP)
    with api(console_proxy) as h:  # another client's turn: two rows come in
        more = [
            *history,
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "more"},
        ]
        resp = h.post("/s/corner/v1/chat/completions", json={"model": "m", "messages": more})
        assert resp.status_code == 200, resp.text
    page.get_by_test_id("message").nth(25).wait_for()
    page.locator("#message-list:not([aria-busy])").wait_for(state="attached")
    assert not page.evaluate(_OVERLAP)


def test_the_memory_prompt_shown_at_the_pages_end_leaves_the_composer_in_sight(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """A suggestion arriving while one reads the page's end (the composer at the window's
    bottom edge) moves the composer above the prompt; it stayed under it."""
    with api(console_proxy) as h:
        history = [m for i in range(8) for m in tool_round(i, 600)]
        resp = h.post("/s/edge/v1/chat/completions", json={"model": "m", "messages": history})
        assert resp.status_code == 200, resp.text
    page = sign_in(console, "#/s/edge")
    page.get_by_test_id("message").nth(23).wait_for()
    page.evaluate("window.scrollTo(0, document.scrollingElement.scrollHeight)")
    facts = {"suggestion_id": "s-edge", "facts": [f"fact {n}" for n in range(6)]}
    inject(db_dsn, "edge", "memory.suggestion", facts)
    page.get_by_test_id("memory-prompt").locator("li", has_text="fact 5").wait_for()
    assert not page.evaluate(_OVERLAP)
