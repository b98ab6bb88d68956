"""The console shows a reply while another client streams it (``session.message.delta.appended``):
an in-progress message grows at the end of the list, then the stored message takes its place,
or, when the turn stored none (the client left), it goes.

The reply is a real stream through the proxy, sent from a thread while the page watches: the
fake upstream sends its pieces as the test lets them go (``Pacer``), once the page has
shown what it is to show before the next one.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.fakes.replies import Pacer, raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import KEY, Page
from tests.integration.ui.settle import settled
from tests.integration.ui.test_console import inject, sign_in, wait_for
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)

MARKUP = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
TEXT = f"Streaming {MARKUP} " + "".join(f"word{i} " for i in range(8))
HISTORY = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": "go on"},
]


@pytest.fixture
def thread() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    """The streaming client's thread: sync Playwright keeps an event loop on this one."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        yield pool


def stream_chat(origin: str, sid: str, *, leave: threading.Event | None = None) -> str:
    """Stream a chat completion as a client; with ``leave``, close the connection at the
    first frame that comes once it is set. The text the client got."""
    text = []
    with (
        httpx.Client(base_url=origin, headers={"authorization": f"Bearer {KEY}"}, timeout=10) as c,
        c.stream(
            "POST",
            f"/s/{sid}/v1/chat/completions",
            json={"model": "m", "messages": HISTORY, "stream": True},
        ) as resp,
    ):
        assert resp.status_code == 200
        for line in resp.iter_lines():
            data = line.removeprefix("data: ")
            if not line.startswith("data: ") or data == "[DONE]":
                continue
            for choice in json.loads(data).get("choices") or []:
                if choice.get("index", 0) == 0:
                    text.append((choice.get("delta") or {}).get("content") or "")
            if leave is not None and leave.is_set():
                break
    return "".join(text)


def open_watching(console: Page, sid: str) -> Any:
    """The session's page, once its event stream is open (the proxy knows it is watched)."""
    with console.page.expect_response(lambda r: r.url.endswith(f"/v1/sessions/{sid}/events")):
        page = sign_in(console, f"#/s/{sid}")
    page.get_by_test_id("message-list").get_by_text("hi", exact=True).wait_for()
    return page


def streaming_texts(page: Any) -> dict[int, str]:
    return {
        int(choice): text
        for choice, text in page.evaluate(
            """() => [...document.querySelectorAll("[data-testid=message-streaming]")]
                .map((li) => [li.dataset.choice, li.querySelector("pre.body").textContent])"""
        )
    }


def test_a_streamed_reply_grows_in_the_list_then_is_the_stored_message(
    console: Page,
    console_proxy: ProxyServer,
    fake_upstream: FakeUpstream,
    thread: concurrent.futures.ThreadPoolExecutor,
) -> None:
    started(console_proxy, "streamed")
    page = open_watching(console, "streamed")
    pacer = Pacer()  # the rest of the reply waits until the page has shown its start
    fake_upstream.script(reply(TEXT, chunks=8, pacer=pacer))
    client = thread.submit(stream_chat, console_proxy.origin, "streamed")
    pacer.allow(2)  # the role frame went at once; then two pieces of the text
    live = page.get_by_test_id("message-streaming")
    live.wait_for()
    partial = live.locator("pre.body").inner_text()
    assert not client.done()  # shown while the reply still streams, not after
    assert partial and TEXT.startswith(partial) and len(partial) < len(TEXT), partial
    assert live.locator("[data-mark=streaming]").is_visible()
    pacer.allow(20)
    assert client.result(timeout=10) == TEXT
    live.wait_for(state="detached")  # the stored message took its place
    stored = page.get_by_test_id("message").last
    assert stored.get_attribute("data-role") == "assistant"
    assert stored.locator("pre.body").inner_text().strip() == TEXT.strip()
    assert page.get_by_test_id("message").count() == 4
    assert page.evaluate("window.__pwned") is None  # the markup was text, never run
    assert page.locator(".msg img, .msg script").count() == 0


def test_choices_and_the_parts_of_a_long_delta_join_in_order(
    console: Page,
    console_proxy: ProxyServer,
    fake_upstream: FakeUpstream,
    thread: concurrent.futures.ThreadPoolExecutor,
) -> None:
    """Two choices stream side by side, and one piece of text too long for one notification
    (cut into several events with ``part``/``parts``) comes back whole, in place."""
    long = "".join(f"{i:05d}," for i in range(3000))  # 18,000 characters: three parts
    head = {"id": "c-two", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def frame(*choices: tuple[int, dict[str, Any], str | None]) -> str:
        body = [{"index": i, "delta": d, "finish_reason": f} for i, d, f in choices]
        return f"data: {json.dumps({**head, 'choices': body})}\n\n"

    started(console_proxy, "two")
    page = open_watching(console, "two")
    pacer = Pacer()
    fake_upstream.script(
        raw(
            frame((0, {"role": "assistant", "content": "zero:"}, None)),
            frame((1, {"role": "assistant", "content": "one:"}, None)),
            frame((0, {"content": long}, None)),
            frame((1, {"content": "-tail"}, None)),
            frame((0, {}, "stop"), (1, {}, "stop")) + "data: [DONE]\n\n",
            pacer=pacer,
        )
    )
    whole = {0: "zero:" + long, 1: "one:-tail"}
    # The provider sends the long piece once the page shows both choices, and the rest once
    # it shows the long piece whole; the page is read all along.
    shown: list[Callable[[dict[int, str]], bool]] = [
        lambda texts: len(texts) == 2,
        lambda texts: texts.get(0) == whole[0],
    ]
    pacer.allow()
    client = thread.submit(stream_chat, console_proxy.origin, "two")
    seen: list[dict[int, str]] = []
    while not client.done():
        seen.append(streaming_texts(page))
        if shown and shown[0](seen[-1]):
            shown.pop(0)
            pacer.allow(1 if shown else 10)
        page.wait_for_timeout(40)
    assert client.result() == whole[0]
    assert not shown and not pacer.expired, seen[-1]
    for texts in seen:  # every text shown was the start of its choice's reply, never garbled
        assert all(whole[c].startswith(t) for c, t in texts.items()), texts
    assert any(texts.get(0) == whole[0] for texts in seen)  # the long delta, whole and in place
    assert any(len(texts) == 2 for texts in seen)
    page.get_by_test_id("message-streaming").first.wait_for(state="detached")
    assert page.get_by_test_id("message").last.get_attribute("data-role") == "assistant"


def test_a_reply_whose_client_left_does_not_stay_in_progress(
    console: Page,
    console_proxy: ProxyServer,
    fake_upstream: FakeUpstream,
    thread: concurrent.futures.ThreadPoolExecutor,
) -> None:
    """No reply is stored, so no ``session.message.appended``: the turn's ``context.usage``
    ends the in-progress message (not the 60 s a stream silent with no event waits)."""
    started(console_proxy, "left")
    page = open_watching(console, "left")
    pacer = Pacer()  # the reply goes no further than the test lets it
    fake_upstream.script(reply(TEXT, chunks=16, pacer=pacer))
    pacer.allow(2)
    leave = threading.Event()
    client = thread.submit(stream_chat, console_proxy.origin, "left", leave=leave)
    live = page.get_by_test_id("message-streaming")
    live.wait_for()
    leave.set()
    pacer.allow()  # the client leaves at this piece
    got = client.result(timeout=10)
    assert got and len(got) < len(TEXT)  # the client left mid-reply
    live.wait_for(state="detached", timeout=5000)
    wait_for(lambda: page.get_by_test_id("message").count() == 3, page)  # nothing stored
    # a fixed wait: nothing more comes for this turn, so no later state orders a streaming
    # item put back against it
    page.wait_for_timeout(500)
    assert page.get_by_test_id("message-streaming").count() == 0


def test_a_reply_with_no_event_after_it_goes_after_a_minute_without_deltas(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """A stream that ended with no event at all (the reply could not be stored) leaves the
    in-progress message for at most a minute without a delta; the page's clock is faked."""
    started(console_proxy, "stale")
    console.page.clock.install()
    page = open_watching(console, "stale")
    inject(db_dsn, "stale", "session.message.delta.appended", {"choice": 0, "delta": "half a"})
    live = page.get_by_test_id("message-streaming")
    live.filter(has_text="half a").wait_for()
    page.clock.fast_forward(30_000)
    inject(db_dsn, "stale", "session.message.delta.appended", {"choice": 0, "delta": " reply"})
    live.filter(has_text="half a reply").wait_for()  # a delta starts the minute again
    page.clock.fast_forward(50_000)
    settled(page, frames=False)  # what the 50 s ran has run
    assert live.count() == 1
    page.clock.fast_forward(11_000)
    live.wait_for(state="detached")


def test_a_reply_streaming_when_the_event_stream_reconnects_goes(
    console: Page, console_proxy: ProxyServer
) -> None:
    """Deltas sent while the stream was down are lost: the reconnected page shows the stored
    messages, not a reply with a hole in it. The first stream is served by the test: one
    delta once live, then it ends; the next one is the proxy's, after that frame's id."""
    started(console_proxy, "cut")
    calls: list[str] = []
    frame = (
        ": live\n\nid: 999999\nevent: session.message.delta.appended\n"
        'data: {"choice": 0, "delta": "cut off", "session_id": "cut", "ts": "t"}\n\n'
    )

    def events(route: Any) -> None:
        calls.append(route.request.headers.get("last-event-id") or "")
        if len(calls) == 1:
            route.fulfill(status=200, content_type="text/event-stream", body=frame)
        else:
            route.continue_()

    console.page.route("**/v1/sessions/cut/events", events)
    page = sign_in(console, "#/s/cut")
    live = page.get_by_test_id("message-streaming")
    live.filter(has_text="cut off").wait_for()
    live.wait_for(state="detached")
    assert calls == ["", "999999"]
    assert page.get_by_test_id("message").count() == 2  # hi, ok: the stored ones
