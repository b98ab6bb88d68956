"""The console's turns past the view that sent them, and its lasting warnings: a message
sent in a session view opened again while the turn sent from the earlier view still runs, a
page whose own turn's stream broke (the proxy killed mid-answer), a lost stream's warning
once its view is left, a deleted session's draft.

Each test fails on the console before its fix; the ``console`` fixture checks that the page
raised no error and asked no host but the proxy.
"""

from __future__ import annotations

import time

import pytest

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import api, inject, sign_in
from tests.integration.ui.test_console_audit import started
from tests.integration.ui.test_console_usability import sent_then_listed

pytestmark = pytest.mark.timeout(60)

# The chat endpoint's stream, as a proxy killed mid-answer leaves it: a first delta, then
# the connection gone (the reader fails with the browser's network error).
_BROKEN_CHAT = """
const realFetch = window.fetch;
window.fetch = (url, init) => {
  if (!String(url).includes("/chat/completions")) return realFetch(url, init);
  const frame = 'data: {"choices":[{"index":0,"delta":{"content":"Half"}}]}\\n\\n';
  const body = new ReadableStream({ start(c) {
    c.enqueue(new TextEncoder().encode(frame));
    setTimeout(() => c.error(new TypeError("network error")), 50);
  } });
  return Promise.resolve(new Response(body, { headers: { "Content-Type": "text/event-stream" } }));
};
"""

# The session's event stream, cut by ``cutEvents()`` as the proxy's going cuts it.
_CUT_EVENTS = """
const eventsFetch = window.fetch;
window.fetch = async (url, init) => {
  const resp = await eventsFetch(url, init);
  if (!String(url).endsWith("/events") || !resp.ok) return resp;
  const reader = resp.body.getReader();
  const body = new ReadableStream({
    start(c) {
      window.cutEvents = () => { c.error(new TypeError("network error")); reader.cancel(); };
    },
    async pull(c) {
      const { value, done } = await reader.read();
      if (done) c.close(); else c.enqueue(value);
    },
  });
  return new Response(body, { status: resp.status, headers: resp.headers });
};
"""


def test_a_message_sent_in_a_view_opened_again_waits_for_the_turn_still_running(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """A turn sent, the list looked at, the session opened again while that turn still
    streams: the next message waits for it, as it does in the view that sent it, and resends
    its reply. It read the history at once, without the reply (an edit, to the proxy)."""
    started(console_proxy, "reopened")
    pacer = Pacer()
    first = "the first answer " * 4
    fake_upstream.script(reply(first, chunks=4, pacer=pacer), reply("Second answer."))
    page = sent_then_listed(console, "reopened", pacer, "one", "first", chunks=1)
    page.go_back()
    page.get_by_test_id("message").nth(1).wait_for()
    page.get_by_test_id("composer-input").fill("two")
    page.get_by_test_id("composer-send").click()
    # a fixed wait: no state shows a send waiting for the turn before it; one that did not
    # wait has read the history by now
    page.wait_for_timeout(300)
    pacer.allow(10)
    page.locator("[data-testid=assistant-message][data-state=done]").filter(
        has_text="Second answer."
    ).wait_for()
    sent = [m["content"] for m in fake_upstream.bodies()[-1]["messages"]]
    assert sent == ["hi", "ok", "one", first, "two"]


def test_a_message_in_a_session_made_again_waits_for_no_turn_of_the_deleted_one(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """A turn sent, the view left while it streams (its last event comes to no stream), the
    session deleted and made again under the id: a message in the new session goes at once.
    It waited five seconds for the deleted session's turn's last event, which never comes."""
    started(console_proxy, "remade")
    pacer = Pacer()
    fake_upstream.script(reply("the first answer " * 4, chunks=4, pacer=pacer))
    page = sent_then_listed(console, "remade", pacer, "one", "first", chunks=1)
    pacer.allow(10)
    with api(console_proxy) as h:
        deadline = time.monotonic() + 10
        while h.get("/v1/sessions/remade").json()["message_count"] < 4:
            assert time.monotonic() < deadline, "the turn's reply was never stored"
            time.sleep(0.02)
        assert h.delete("/v1/sessions/remade").status_code in (200, 204)
    started(console_proxy, "remade")
    fake_upstream.script(reply("Second answer."))
    page.go_back()
    page.get_by_test_id("message").nth(1).wait_for()
    page.get_by_test_id("composer-input").fill("two")
    page.get_by_test_id("composer-send").click()
    page.locator("[data-testid=assistant-message][data-state=done]").filter(
        has_text="Second answer."
    ).wait_for(timeout=3000)
    sent = [m["content"] for m in fake_upstream.bodies()[-1]["messages"]]
    assert sent == ["hi", "ok", "two"]


def test_a_turn_whose_stream_broke_hides_no_other_clients_reply(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """The proxy killed mid-answer: the page's turn never gets its last event. Another
    client's reply streaming on the session once the proxy is back (the event stream live
    again) shows in the list all the same; the page took every delta for its own turn's and
    hid them until the next turn or a reload."""
    started(console_proxy, "broken")
    console.page.add_init_script(_BROKEN_CHAT)
    console.page.add_init_script(_CUT_EVENTS)
    page = sign_in(console, "#/s/broken")
    page.get_by_test_id("message").nth(1).wait_for()
    page.get_by_test_id("composer-input").fill("one")
    page.get_by_test_id("composer-send").click()
    page.locator("[data-testid=assistant-message][data-state=failed]").wait_for()
    with page.expect_response(lambda r: r.url.endswith("/v1/sessions/broken/events")):
        page.evaluate("cutEvents()")  # the proxy gone, and back
    page.get_by_test_id("toast").filter(has_text="Live updates are back").wait_for()
    inject(db_dsn, "broken", "session.message.delta.appended", {"choice": 0, "delta": "theirs"})
    page.get_by_test_id("message-streaming").filter(has_text="theirs").wait_for(timeout=3000)


def test_a_lost_streams_warning_goes_with_its_view(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The warning that a view's live updates stopped lasts until they are back; the view
    left, nothing reconnects any more, and the warning stayed for good (with the list, with
    another session) saying it was reconnecting."""
    started(console_proxy, "gone-away")
    console.page.route("**/v1/sessions/gone-away/events", lambda route: route.abort())
    page = sign_in(console, "#/s/gone-away")
    lost = page.get_by_test_id("toast").filter(has_text="live updates stopped")
    lost.wait_for()
    page.locator(".brand").click()
    page.get_by_test_id("session-row").first.wait_for()
    lost.wait_for(state="detached", timeout=2000)


def test_a_deleted_sessions_draft_goes_with_it(console: Page, console_proxy: ProxyServer) -> None:
    """A session deleted from its view keeps no draft: one started again under its id
    opened with the text typed into the one deleted."""
    started(console_proxy, "drafted")
    page = sign_in(console, "#/s/drafted")
    page.get_by_test_id("message").nth(1).wait_for()
    box = page.get_by_test_id("composer-input")
    box.fill("typed before the delete")
    page.get_by_test_id("action-delete").click()
    page.get_by_test_id("confirm-ok").click()
    page.locator("#list-view").wait_for()
    started(console_proxy, "drafted")
    page.goto(f"{console.origin}/ui#/s/drafted")
    page.get_by_test_id("message").nth(1).wait_for()
    assert box.input_value() == ""


def test_a_message_that_fails_once_its_view_is_left_says_so(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A message refused after the person went to the list (the proxy away): the page says
    so, naming the session; it said nothing, and the message was lost without a word."""
    started(console_proxy, "unheard")
    console.page.add_init_script(
        """const realFetch = window.fetch;
        window.fetch = (url, init) => String(url).includes("/chat/completions")
          ? new Promise((_, no) => setTimeout(() => no(new TypeError("Failed to fetch")), 400))
          : realFetch(url, init);"""
    )
    page = sign_in(console, "#/s/unheard")
    page.get_by_test_id("message").nth(1).wait_for()
    page.get_by_test_id("composer-input").fill("one")
    page.get_by_test_id("composer-send").click()
    page.locator(".brand").click()
    page.get_by_test_id("session-row").first.wait_for()
    failed = page.get_by_test_id("toast").filter(has_text="not answered")
    failed.filter(has_text="unheard").wait_for(timeout=2000)
    assert page.locator("#list-view").is_visible()


def test_the_earlier_views_reply_keeps_streaming_while_the_next_message_waits(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """In the view opened again, the turn sent from the earlier one streams in the list; a
    message sent meanwhile waits for it, and the reply goes on growing there while it waits:
    it froze, every delta taken for the waiting message's own."""
    started(console_proxy, "still-growing")
    pacer = Pacer()
    fake_upstream.script(reply("alpha beta gamma delta", chunks=4, pacer=pacer), reply("Next."))
    page = sign_in(console, "#/s/still-growing")
    page.get_by_test_id("message").nth(1).wait_for()
    page.get_by_test_id("composer-input").fill("one")
    page.get_by_test_id("composer-send").click()
    pacer.allow(1)
    page.get_by_test_id("assistant-message").filter(has_text="alpha").wait_for()
    page.locator(".brand").click()
    page.get_by_test_id("session-row").first.wait_for()
    page.go_back()
    page.get_by_test_id("message").nth(1).wait_for()
    pacer.allow(1)
    streaming = page.get_by_test_id("message-streaming")
    streaming.filter(has_text="beta").wait_for()
    page.get_by_test_id("composer-input").fill("two")
    page.get_by_test_id("composer-send").click()
    pacer.allow(1)
    streaming.filter(has_text="gamma").wait_for(timeout=2000)
    pacer.allow(10)
    page.locator("[data-testid=assistant-message][data-state=done]").filter(
        has_text="Next."
    ).wait_for()


def test_the_next_question_typed_while_the_answer_streams_stays(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The message sent stays in the composer until it is answered (a failure leaves it to
    send again); one who replaced it with the next question while the answer streamed found
    the box emptied when the answer ended, the question lost."""
    started(console_proxy, "ahead")
    pacer = Pacer()
    fake_upstream.script(reply("alpha beta gamma", chunks=3, pacer=pacer))
    page = sign_in(console, "#/s/ahead")
    page.get_by_test_id("message").nth(1).wait_for()
    box = page.get_by_test_id("composer-input")
    box.fill("one")
    page.get_by_test_id("composer-send").click()
    pacer.allow(1)
    page.get_by_test_id("assistant-message").filter(has_text="alpha").wait_for()
    box.fill("the next question")
    pacer.allow(10)
    page.locator("[data-testid=assistant-message][data-state=done]").wait_for()
    assert box.input_value() == "the next question"
