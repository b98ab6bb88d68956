"""The web console at /ui, end to end in headless chromium (issue 26).

Each test drives the page as a person would, against a real proxy and the fake upstream, and
the ``console`` fixture checks afterwards that the page asked no host but the proxy.
Events the proxy does not emit yet (the handoff nudge, memory suggestions) are injected as
persisted event rows, which the session's event stream delivers like any other; finding a
saved fact through the memory API waits for that API (issue 22).
"""

from __future__ import annotations

import concurrent.futures
import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.store.db import create_pool
from proxy.store.events import insert_event
from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Model, briefing
from tests.integration.api.conftest import ProxyServer
from tests.integration.conftest import run_sync
from tests.integration.ui.conftest import KEY, MAX_CHARS, TENANT, Page

# the whole test, its per-test database, proxy and chromium start included: on a loaded
# 2-core machine chromium's start alone has taken over 20 s (its launch timeout)
pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[3]
SCREENSHOT = REPO / "docs" / "console.png"


def sign_in(console: Page, fragment: str = "#/") -> Any:
    page = console.page
    page.goto(f"{console.origin}/ui{fragment}")
    page.get_by_test_id("login-key").fill(KEY)
    page.get_by_test_id("login-submit").click()
    return page


def api(proxy: ProxyServer) -> httpx.Client:
    return httpx.Client(
        base_url=proxy.origin, headers={"authorization": f"Bearer {KEY}"}, timeout=10
    )


def posted(proxy: ProxyServer, session_id: str, messages: list[dict[str, Any]]) -> None:
    """A chat request of ``messages`` to ``session_id``, answered 200."""
    with api(proxy) as h:
        resp = h.post(
            f"/s/{session_id}/v1/chat/completions", json={"model": "m", "messages": messages}
        )
        assert resp.status_code == 200, resp.text


def inject(db_dsn: str, session_id: str, name: str, data: dict[str, Any]) -> None:
    async def go() -> None:
        pool = await create_pool(db_dsn, min_size=1, max_size=1)  # the proxy's JSON codecs
        try:
            await insert_event(
                pool,
                tenant=TENANT,
                session_id=session_id,
                name=name,
                data={"session_id": session_id, **data},
            )
        finally:
            await pool.close()

    # on its own thread: sync Playwright keeps an event loop running on this one
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(run_sync, go()).result(timeout=10)


def occupancy(page: Any) -> int:
    return int(page.get_by_test_id("usage-bar").get_attribute("data-occupancy") or 0)


def tool_round(i: int, size: int) -> list[dict[str, Any]]:
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "read_file", "arguments": f'{{"path": "f{i}.txt"}}'},
    }
    body = "".join(f"file {i} line {n:04d}\n" for n in range(size // 20 + 1))[:size]
    return [
        {"role": "user", "content": f"read f{i}.txt"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": body},
    ]


def stream_live(page: Any) -> None:
    """The session view's event stream is live: the proxy said ``: live`` after its replay,
    so every event it replays as it opens has been heard, and the loads they started are in
    (the message list is not busy)."""
    page.locator("#session-view[data-stream=live]").wait_for(state="attached")
    wait_for(lambda: not page.evaluate("document.getElementById('message-list').ariaBusy"), page)


def wait_for(predicate: Any, page: Any, timeout_ms: int = 8000) -> None:
    deadline = timeout_ms
    while not predicate():
        if deadline <= 0:
            raise AssertionError("the page never got there")
        page.wait_for_timeout(50)
        deadline -= 50


# ------------------------------------------------------------------------------- the tests


def test_the_shell_needs_no_key_and_pins_every_request_to_the_proxy(
    console_proxy: ProxyServer,
) -> None:
    with httpx.Client(base_url=console_proxy.origin, timeout=10) as anon:
        for path in ("/ui", "/ui/", "/ui/static/app.js", "/ui/static/app.css"):
            resp = anon.get(path)
            assert resp.status_code == 200, path
            assert "connect-src 'self'" in resp.headers["content-security-policy"]
        assert "javascript" in anon.get("/ui/static/api.js").headers["content-type"]
        assert anon.get("/v1/sessions").status_code == 401  # the data still needs a key
        assert anon.get("/ui/static/nothing.js").status_code == 404


def test_a_message_from_the_composer_streams_in_and_the_usage_bar_moves(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(
        reply(
            "Hello from the fake model, streamed in pieces.",
            chunks=6,
            chunk_delay=0.05,
            usage=(1200, 12),
        )
    )
    fake_upstream.script(reply("A second answer.", usage=(2600, 4)))
    page = sign_in(console, "#/s/from-ui")
    assert occupancy(page) == 0
    page.get_by_test_id("composer-input").fill("Hello?")
    page.get_by_test_id("composer-send").click()
    answer = page.get_by_test_id("assistant-message")
    answer.filter(has_text="Hello from the fake model, streamed in pieces.").wait_for()
    wait_for(lambda: occupancy(page) == 1200, page)
    page.get_by_test_id("message-list").get_by_text("Hello?").wait_for()
    # the page now follows the session's events: its own reply's deltas are not shown a
    # second time, as a streaming item in the list beside the answer box
    page.evaluate(
        """() => {
          window.streamingItems = 0;
          new MutationObserver((records) => {
            for (const r of records) for (const n of r.addedNodes)
              if (n.nodeType === 1 && (n.matches('[data-testid="message-streaming"]')
                  || n.querySelector('[data-testid="message-streaming"]')))
                window.streamingItems += 1;
          }).observe(document.body, { childList: true, subtree: true });
        }"""
    )
    page.get_by_test_id("composer-input").fill("And again")
    page.get_by_test_id("composer-send").click()
    answer.filter(has_text="A second answer.").wait_for()
    wait_for(lambda: occupancy(page) == 2600, page)
    # the proxy saw one conversation: the second request resent the first exchange
    last = fake_upstream.bodies()[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user"]
    assert last[1]["content"] == "Hello from the fake model, streamed in pieces."
    assert page.evaluate("window.streamingItems") == 0
    # the key was asked once: a reload keeps it, and the list shows the session
    page.goto(f"{console.origin}/ui#/")
    assert page.get_by_test_id("login-key").is_hidden()
    rows = page.get_by_test_id("session-row")
    rows.first.wait_for()
    assert rows.count() == 1 and "from-ui" in rows.first.inner_text()
    rows.first.click()
    page.wait_for_url(re.compile(r"#/s/from-ui$"))


def test_a_handoff_suggestion_is_a_toast_and_compaction_a_quiet_status_line(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    with api(console_proxy) as h:
        h.post(
            "/s/nudged/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
    page = sign_in(console, "#/s/nudged")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    inject(db_dsn, "nudged", "context.compaction.started", {"trigger": "soft"})
    page.get_by_test_id("status-line").filter(has_text="Compacting").wait_for()
    inject(db_dsn, "nudged", "context.compaction.failed", {"reason": "provider down"})
    page.get_by_test_id("status-line").filter(has_text="provider down").wait_for()
    inject(db_dsn, "nudged", "context.handoff_suggested", {"fraction": 0.93})
    toast = page.get_by_test_id("toast").filter(has_text="handing off")
    toast.wait_for()
    assert "93%" in toast.inner_text()
    assert page.get_by_test_id("toast").count() == 1  # the compaction was no toast


def test_a_memory_suggestion_asks_and_its_buttons_call_the_memory_api(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    with api(console_proxy) as h:
        h.post(
            "/s/remember/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
    page = sign_in(console, "#/s/remember")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    calls: list[str] = []
    page.on(
        "request",
        lambda r: (
            calls.append(f"{r.method} {r.url}")
            if r.method == "POST" and "/v1/memory/" in r.url
            else None
        ),
    )
    inject(
        db_dsn,
        "remember",
        "memory.suggestion",
        {
            "suggestion_id": "sug-1",
            "facts": ["The build uses uv", "Tests run with make test"],
        },
    )
    prompt = page.get_by_test_id("memory-prompt")
    prompt.filter(has_text="Remember these 2 things?").wait_for()
    assert "The build uses uv" in prompt.inner_text()
    page.get_by_test_id("memory-save").click()
    prompt.wait_for(state="hidden")
    with api(console_proxy) as h:  # Save stored both facts where the memory API finds them
        facts = h.get("/v1/memory", params={"scope": "global"}).json()["data"]
        assert [f["text"] for f in facts] == ["The build uses uv", "Tests run with make test"]
    inject(
        db_dsn,
        "remember",
        "memory.suggestion",
        {
            "suggestion_id": "sug-2",
            "facts": ["Deploys go through CI"],
        },
    )
    prompt.filter(has_text="Deploys go through CI").wait_for()
    page.get_by_test_id("memory-dismiss").click()
    prompt.wait_for(state="hidden")
    with api(console_proxy) as h:
        assert h.get("/v1/memory/suggestions").json()["data"] == []
        assert len(h.get("/v1/memory").json()["data"]) == 2
    assert calls == [
        f"POST {console.origin}/v1/memory/suggestions/sug-1/accept",
        f"POST {console.origin}/v1/memory/suggestions/sug-2/reject",
    ]


def test_the_actions_ask_first_and_the_list_filters(
    console: Page, console_proxy: ProxyServer
) -> None:
    with api(console_proxy) as h:
        for sid in ("alpha", "beta"):
            h.post(
                f"/s/{sid}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": f"hi {sid}"}]},
            )
    page = sign_in(console)
    rows = page.get_by_test_id("session-row")
    rows.nth(1).wait_for()
    page.get_by_test_id("session-filter").fill("alp")
    wait_for(lambda: rows.count() == 1, page)
    rows.first.click()
    page.get_by_test_id("message-list").get_by_text("hi alpha").wait_for()
    page.get_by_test_id("action-reset").click()
    page.get_by_test_id("confirm-cancel").click()  # asked, and refused: nothing happens
    page.get_by_test_id("confirm").wait_for(state="hidden")
    assert page.get_by_test_id("message-list").get_by_text("hi alpha").is_visible()
    page.get_by_test_id("action-reset").click()
    page.get_by_test_id("confirm-ok").click()
    page.get_by_test_id("status-line").filter(has_text="reset").wait_for()
    wait_for(lambda: page.get_by_test_id("message").count() == 0, page)
    page.get_by_test_id("action-branch").click()
    page.get_by_test_id("confirm-ok").click()
    page.wait_for_url(re.compile(r"#/s/alpha-branch-"))
    page.get_by_test_id("action-delete").click()
    page.get_by_test_id("confirm-ok").click()
    page.wait_for_url(re.compile(r"#/$"))
    page.get_by_test_id("session-row").first.wait_for()
    with api(console_proxy) as h:
        ids = sorted(s["id"] for s in h.get("/v1/sessions").json()["data"])
    assert ids == ["alpha", "beta"]  # the branch is gone, its parent stays


def test_cut_and_evicted_outputs_page_back(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    chatter = [
        m
        for i in range(3)
        for m in (
            {"role": "user", "content": f"Question {i}: where does the parser fail? " * 8},
            {"role": "assistant", "content": f"Answer {i}: in the tokenizer, probably. " * 8},
        )
    ]
    history = [*chatter, *tool_round(1, 1200), *tool_round(2, 1200), *tool_round(3, 5000)]
    fake_upstream.script(reply("Read them all.", usage=(1900, 4)))
    with api(console_proxy) as h:
        resp = h.post("/s/paged/v1/chat/completions", json={"model": "m", "messages": history})
        assert resp.status_code == 200, resp.text
    page = sign_in(console, "#/s/paged")
    listing = page.get_by_test_id("message-list")
    evicted = listing.locator("[data-tool-call-id=call_1]")
    evicted.locator("[data-mark=evicted]").wait_for()
    evicted.get_by_test_id("raw-page").click()
    evicted.get_by_test_id("raw-output").filter(has_text="file 1 line 0000").wait_for()
    cut = listing.locator("[data-tool-call-id=call_3]")
    cut.locator("[data-mark=truncated]").wait_for()
    assert len(cut.locator("pre.body").inner_text()) <= MAX_CHARS
    cut.get_by_test_id("raw-page").click()  # the proxy's pages (MAX_CHARS each), one press
    cut.get_by_test_id("raw-status").filter(has_text="All shown").wait_for()
    raw = cut.get_by_test_id("raw-output")
    assert raw.text_content() == tool_round(3, 5000)[2]["content"]  # each page follows on
    reclaimed = page.get_by_test_id("usage-reclaimed")
    assert reclaimed.is_visible()
    assert "eviction" in reclaimed.inner_text() and "truncation" in reclaimed.inner_text()
    summary = page.get_by_test_id("summary")
    assert "No summary yet" in summary.inner_text()
    # a compaction from the page: the summary shows by section, summarisation as reclaimed
    fake_upstream.default = Model(brief=lambda _: briefing("- parser.py: the fix"))
    page.get_by_test_id("action-compact").click()
    page.get_by_test_id("confirm-ok").click()
    page.get_by_test_id("status-line").filter(has_text="Compacted").wait_for()
    summary.locator("h3", has_text="Files & State").wait_for()
    assert "parser.py: the fix" in summary.locator("section", has_text="Files & State").inner_text()
    reclaimed.filter(has_text="summarisation").wait_for()
    assert listing.locator("[data-mark=summarised]").count() > 0  # what the summary folded
    # the evicted result, folded since: summarised, not evicted, and it still pages back
    evicted.locator("[data-mark=summarised]").wait_for()
    assert evicted.locator("[data-mark=evicted]").count() == 0
    assert evicted.get_by_test_id("raw-page").count() == 1
    cut.get_by_test_id("raw-output").wait_for()  # kept through the refreshes
    target = os.environ.get("CASCADE_CONSOLE_SCREENSHOT")
    if os.environ.get("CASCADE_UPDATE_SCREENSHOT"):
        target = str(SCREENSHOT)
    if target:
        page.evaluate("document.activeElement && document.activeElement.blur()")
        page.set_viewport_size({"width": 1280, "height": 1500})
        page.screenshot(path=target)
    # the composer resends the history as it was sent: the rewritten rows are not an edit
    page.get_by_test_id("composer-input").fill("What next?")
    page.get_by_test_id("composer-send").click()
    page.get_by_test_id("assistant-message").filter(has_text="ok").wait_for()
    with api(console_proxy) as h:
        assert h.get("/v1/sessions/paged").json()["superseded_count"] == 0
    sent = fake_upstream.bodies()[-1]["messages"]
    assert all(m.get("content") != history[-1]["content"] for m in sent)  # cut again


def test_an_older_result_under_a_reused_id_pages_back_its_own_output(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # A client that numbers its calls call_0 every turn: the id alone reads the newest
    # result, so each row pages back by its handle pinned to its position.
    history = [*tool_round(1, 5000), *tool_round(2, 5000)]
    for m in history:
        for call in m.get("tool_calls") or []:
            call["id"] = "call_0"
        if m["role"] == "tool":
            m["tool_call_id"] = "call_0"
    fake_upstream.script(reply("Read both.", usage=(1900, 4)))
    with api(console_proxy) as h:
        resp = h.post("/s/reused/v1/chat/completions", json={"model": "m", "messages": history})
        assert resp.status_code == 200, resp.text
    page = sign_in(console, "#/s/reused")
    listing = page.get_by_test_id("message-list")
    for pos, tag in ((2, "file 1"), (5, "file 2")):
        row = listing.locator(f"[data-pos='{pos}']")
        row.locator("[data-mark=truncated]").wait_for()
        row.get_by_test_id("raw-page").click()
        row.get_by_test_id("raw-output").filter(has_text=f"{tag} line 0000").wait_for()
    older = listing.locator("[data-pos='2']").get_by_test_id("raw-output").inner_text()
    assert "file 2" not in older
