"""The composer: Ctrl+Enter that confirms an input method's candidate while text is being
composed (Japanese, Chinese, Korean input) is the input method's key, not a send; only a
Ctrl+Enter once the text is composed sends it. A message sent before the last turn's events
came resends that turn's reply, and its own reply is not shown a second time from them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.services.turn import Turn
from tests.fakes.replies import raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import sign_in
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)

# A keydown as an input method sends it while composing: Chrome marks it isComposing, and
# older engines (and some input methods) give keyCode 229 alone.
_COMPOSING_CTRL_ENTER = """([composing, legacy]) => {
  const input = document.querySelector('[data-testid="composer-input"]');
  const event = new KeyboardEvent("keydown", {
    key: "Enter", code: "Enter", ctrlKey: true, isComposing: composing,
    bubbles: true, cancelable: true,
  });
  if (legacy) Object.defineProperty(event, "keyCode", { value: 229 });
  input.dispatchEvent(event);
  return event.defaultPrevented;
}"""


def test_ctrl_enter_while_composing_does_not_send(
    console: Page, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("Composed and sent."))
    page = sign_in(console, "#/s/composing")
    box = page.get_by_test_id("composer-input")
    box.fill("変換中")
    for flags in ([True, False], [False, True]):
        assert page.evaluate(_COMPOSING_CTRL_ENTER, flags) is False
    assert box.input_value() == "変換中"
    # once composed, the same keys send; the one message the upstream gets holds the text
    # composed, so the keys before it sent nothing (a send of theirs, in flight or done,
    # would be the text being composed)
    box.fill("変換済み")
    box.press("Control+Enter")
    page.get_by_test_id("assistant-message").filter(has_text="Composed and sent.").wait_for()
    assert [b["messages"][-1]["content"] for b in fake_upstream.bodies()] == ["変換済み"]


# The session's event stream as the page reads it, held back while ``window.held`` is a list
# and handed on in order by ``release()``; ``window.live`` once the stream said ": live".
_HELD_EVENTS = """(() => {
  const fetched = window.fetch.bind(window);
  window.held = null;
  window.live = false;
  window.release = () => {
    const held = window.held;
    window.held = null;
    held.forEach((go) => go());
  };
  window.fetch = async (input, init) => {
    const resp = await fetched(input, init);
    if (!String(input).endsWith("/events") || !resp.ok) return resp;
    const reader = resp.body.getReader();
    const text = new TextDecoder();
    let seen = "";
    const body = new ReadableStream({
      async pull(ctrl) {
        const { value, done } = await reader.read();
        seen += done ? "" : text.decode(value, { stream: true });
        window.live = window.live || seen.includes(": live");
        const go = () => (done ? ctrl.close() : ctrl.enqueue(value));
        if (window.held) window.held.push(go); else go();
      },
      cancel: (why) => reader.cancel(why),
    });
    return new Response(body, { status: resp.status, headers: resp.headers });
  };
})()"""

# Counts the streaming items the message list ever shows, however briefly.
_COUNT_STREAMING = """() => {
  window.streamingItems = 0;
  new MutationObserver((records) => {
    for (const r of records) for (const n of r.addedNodes)
      if (n.nodeType === 1 && n.matches('[data-testid="message-streaming"]'))
        window.streamingItems += 1;
  }).observe(document.getElementById("message-list"), { childList: true });
}"""

HISTORY = ["hi", "ok", "one", "First answer.", "two"]


def _watching(console: Page, sid: str) -> Any:
    """The session's page once its event stream is live (its replay read)."""
    console.page.add_init_script(_HELD_EVENTS)
    page = sign_in(console, f"#/s/{sid}")
    page.wait_for_function("() => window.live")
    page.evaluate(_COUNT_STREAMING)
    return page


def _send(page: Any, fake_upstream: FakeUpstream, text: str, said: str) -> None:
    fake_upstream.script(reply(said, chunks=3))
    page.get_by_test_id("composer-input").fill(text)
    page.get_by_test_id("composer-send").click()


def _answered(page: Any, said: str) -> None:
    page.locator("[data-testid=assistant-message][data-state=done]").filter(
        has_text=said
    ).wait_for()


def test_a_message_sent_before_the_last_turns_events_came_waits_for_them(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The second message is sent while the first turn's events are still on their way (a
    slow stream): it waits for that turn's last event, which is stored with its reply, before
    it reads the history it resends; and its own reply's deltas, which come after that event,
    are the page's own, in the answer box, not a streaming item in the list as well."""
    started(console_proxy, "late-events")
    page = _watching(console, "late-events")
    page.evaluate("window.held = []")
    _send(page, fake_upstream, "one", "First answer.")
    _answered(page, "First answer.")
    _send(page, fake_upstream, "two", "Second answer.")
    # a fixed wait: no state shows a send waiting for the last turn's events; one that did
    # not wait would have reached the upstream by now
    page.wait_for_timeout(300)
    assert len(fake_upstream.bodies()) == 2
    page.evaluate("release()")
    _answered(page, "Second answer.")
    assert [m["content"] for m in fake_upstream.bodies()[-1]["messages"]] == HISTORY
    page.get_by_test_id("message").filter(has_text="Second answer.").wait_for()
    assert page.evaluate("window.streamingItems") == 0


def test_a_message_sent_at_once_resends_the_reply_stored_after_its_answer(
    console: Page,
    console_proxy: ProxyServer,
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reply is stored just after its answer (README, "Timing of writes"), here half a
    second after: a second message sent as soon as the first is answered resends the history
    with that reply in it, not without it (which the proxy would take for an edit)."""
    started(console_proxy, "at-once")
    finish = Turn.finish

    async def late(self: Turn, *args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(0.5)
        await finish(self, *args, **kwargs)

    monkeypatch.setattr(Turn, "finish", late)
    page = _watching(console, "at-once")
    _send(page, fake_upstream, "one", "First answer.")
    _answered(page, "First answer.")
    _send(page, fake_upstream, "two", "Second answer.")
    _answered(page, "Second answer.")
    assert [m["content"] for m in fake_upstream.bodies()[-1]["messages"]] == HISTORY


def test_a_turn_that_failed_mid_stream_ends_at_its_own_last_event(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """A stream that opened and then failed (the provider's error event) still ends its turn
    with context.usage: the turn stays in the page's queue until then, so that event does not
    end the next turn, whose deltas would show a second time in the list."""
    started(console_proxy, "failed-turn")
    page = _watching(console, "failed-turn")
    page.evaluate("window.held = []")
    fake_upstream.script(
        raw(
            'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
            '"choices":[{"index":0,"delta":{"role":"assistant","content":"Half"},'
            '"finish_reason":null}]}\n\n',
            'data: {"error":{"message":"overloaded","type":"server_error","code":null}}\n\n',
        )
    )
    page.get_by_test_id("composer-input").fill("one")
    page.get_by_test_id("composer-send").click()
    page.locator("[data-testid=assistant-message][data-state=failed]").wait_for()
    _send(page, fake_upstream, "two", "Second answer.")
    page.wait_for_timeout(300)  # fixed: no state shows the send waiting for the events
    page.evaluate("release()")
    _answered(page, "Second answer.")
    page.get_by_test_id("message").filter(has_text="Second answer.").wait_for()
    page.wait_for_timeout(300)  # fixed: the row may come from the own refresh, not after them
    assert page.evaluate("window.streamingItems") == 0


def test_the_streams_first_replay_does_not_end_a_turn_sent_meanwhile(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The stream a view opens replays the session's events, earlier turns' context.usage
    among them: a message sent before that replay came is not ended by them, so its reply's
    deltas, which come after, are not shown a second time in the list."""
    started(console_proxy, "replayed")
    console.page.add_init_script(_HELD_EVENTS)
    console.page.add_init_script("window.held = []")
    page = sign_in(console, "#/s/replayed")
    page.get_by_test_id("message").first.wait_for()
    page.evaluate(_COUNT_STREAMING)
    _send(page, fake_upstream, "one", "Fresh answer.")
    _answered(page, "Fresh answer.")
    page.evaluate("release()")
    page.get_by_test_id("message").filter(has_text="Fresh answer.").wait_for()
    page.wait_for_timeout(300)  # fixed: the row may come from the own refresh, not after them
    assert page.evaluate("window.streamingItems") == 0


def test_another_clients_turn_does_not_end_the_pages_own(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """Another client's turn on the session (a second tab, an agent) ends with its own
    context.usage, which names its request: it ends none of the page's turns, so the page's
    reply, which streams after it, is not shown a second time in the list."""
    started(console_proxy, "two-clients")
    page = _watching(console, "two-clients")
    page.evaluate("window.held = []")
    fake_upstream.script(reply("Elsewhere."))
    started(console_proxy, "two-clients")  # its events wait in the held stream
    _send(page, fake_upstream, "one", "Own answer.")
    _answered(page, "Own answer.")
    page.evaluate("release()")
    page.get_by_test_id("message").filter(has_text="Own answer.").wait_for()
    page.wait_for_timeout(300)  # fixed: the row may come from the own refresh, not after them
    assert page.evaluate("window.streamingItems") == 0
