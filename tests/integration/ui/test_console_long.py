"""The console on a long agent session: live events fetch what changed, not the history.

The session holds about 2000 messages, a real agent's transcripts (the shared mini-swe-agent
trajectories, read where they are, never copied into the repo; where they are not, tool
rounds made up here) resent end to end as one client's history. While the page shows it,
agent turns append rows and a burst of events arrives; the page loads its last rows once (a
window: the rest is "load earlier"'s), fetches only the rows after the ones it has for the
rest, and reads the window again only when earlier rows change in place (an eviction)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from proxy.store.db import create_pool
from proxy.store.events import insert_event
from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import replied
from tests.integration.conftest import run_sync
from tests.integration.ui.conftest import ROOMY, TENANT, Page
from tests.integration.ui.test_console import (
    api,
    inject,
    sign_in,
    stream_live,
    tool_round,
    wait_for,
)

pytestmark = [pytest.mark.timeout(120), ROOMY]

TRAJECTORIES = Path(
    os.environ.get("CASCADE_TRAJECTORIES", "/work/shared/data/trajectories")
).resolve()
SOURCES = (
    "SWE-agent__mini-swe-agent__django__django-11910.traj.json",
    "SWE-agent__mini-swe-agent__sqlfluff__sqlfluff-1763.traj.json",
)
TARGET = 2000
SID = "long-agent"
WINDOW = 200  # rows.js: the rows a first load shows, and each "load earlier" adds


def _clean(msg: dict[str, Any], lap: int) -> dict[str, Any]:
    """An OpenAI message of the transcript's (its tool-call ids made unique per lap)."""
    out: dict[str, Any] = {"role": msg["role"], "content": msg.get("content") or ""}
    if msg.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": f"{c['id']}-{lap}",
                "type": "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                },
            }
            for c in msg["tool_calls"]
        ]
        out["content"] = msg.get("content") or None
    if msg["role"] == "tool":
        out["tool_call_id"] = f"{msg['tool_call_id']}-{lap}"
    return out


def long_history() -> list[dict[str, Any]]:
    """About TARGET messages: the transcripts' system message once, then their turns again
    and again, each lap starting at a user message and ending on a tool result."""
    paths = [TRAJECTORIES / name for name in SOURCES]
    if not all(path.exists() for path in paths):
        rounds = [m for i in range(TARGET // 3) for m in tool_round(i, 800)]
        return [{"role": "system", "content": "You are a coding agent."}, *rounds]
    laps = [json.loads(path.read_text(encoding="utf-8"))["messages"] for path in paths]
    history = [_clean(laps[0][0], 0)]
    lap = 0
    while len(history) < TARGET:
        body = laps[lap % len(laps)][1:]
        while body and body[-1]["role"] != "tool":
            body = body[:-1]  # the next lap's user message follows a tool result
        history.extend(_clean(m, lap) for m in body[: TARGET - len(history)])
        lap += 1
    while history[-1]["role"] == "assistant" and history[-1].get("tool_calls"):
        history.pop()  # a call with no result would be a history no provider takes
    return history


class Loads:
    """The page's requests for the session's messages, and the bytes each answer held."""

    def __init__(self, console: Page) -> None:
        self.responses: list[Any] = []
        console.page.on("response", self._seen)
        self.cdp = console.page.context.new_cdp_session(console.page)
        self.cdp.send("Performance.enable")

    def _seen(self, response: Any) -> None:
        if f"/v1/sessions/{SID}/messages?" in response.url and "form=sent" not in response.url:
            self.responses.append(response)

    def busy(self) -> float:
        """The main thread's time on tasks so far (script, layout, style), in ms."""
        metrics = self.cdp.send("Performance.getMetrics")["metrics"]
        return 1000 * next(m["value"] for m in metrics if m["name"] == "TaskDuration")

    def mark(self) -> int:
        return len(self.responses)

    def offset(self, response: Any) -> int:
        found = re.search(r"[?&]offset=(\d+)", response.url)
        return int(found.group(1)) if found else 0

    def full(self, since: int = 0) -> int:
        """Loads of the whole window: from the first load's offset (or before), where the
        rows after the last one held start further on."""
        first = self.offset(self.responses[0])
        return sum(self.offset(r) <= first for r in self.responses[since:])

    def bytes(self, since: int = 0) -> int:
        return sum(len(r.body()) for r in self.responses[since:])


def _on_db(db_dsn: str, work: Any) -> None:
    async def go() -> None:
        pool = await create_pool(db_dsn, min_size=1, max_size=1)  # the proxy's JSON codecs
        try:
            await work(pool)
        finally:
            await pool.close()

    # on its own thread: sync Playwright keeps an event loop running on this one
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(run_sync, go()).result(timeout=30)


def burst(db_dsn: str, names: list[str]) -> None:
    async def work(pool: asyncpg.Pool) -> None:
        for name in names:
            await insert_event(
                pool, tenant=TENANT, session_id=SID, name=name, data={"session_id": SID}
            )

    _on_db(db_dsn, work)


def evict(db_dsn: str, pos: int) -> None:
    """An earlier row cleared in place, as eviction clears one, and its event, right after
    an event that starts a load of the new rows: the reload it asks for waits behind that."""

    async def work(pool: asyncpg.Pool) -> None:
        await insert_event(
            pool, tenant=TENANT, session_id=SID, name="session.message.appended", data={}
        )
        await pool.execute(
            "UPDATE messages SET evicted_at = now() WHERE tenant = $1 AND session_id = $2"
            " AND pos = $3 AND superseded_at IS NULL",
            TENANT,
            SID,
            pos,
        )
        await insert_event(
            pool, tenant=TENANT, session_id=SID, name="context.evicted", data={"count": 1}
        )

    _on_db(db_dsn, work)


@pytest.fixture
def session(console_proxy: Any, fake_upstream: FakeUpstream) -> Iterator[list[dict[str, Any]]]:
    """The long session, started with its whole history; what a client sent, to extend."""
    history = long_history()
    fake_upstream.script(reply("turn 0 answered"))
    with api(console_proxy) as h:
        resp = h.post(f"/s/{SID}/v1/chat/completions", json={"model": "m", "messages": history})
        assert resp.status_code == 200, resp.text
        replied(h, SID)  # the console counts the reply, stored just after its answer
    history.append({"role": "assistant", "content": "turn 0 answered"})
    yield history


def test_live_events_on_a_long_session_fetch_only_what_changed(
    console: Page,
    console_proxy: Any,
    fake_upstream: FakeUpstream,
    db_dsn: str,
    session: list[dict[str, Any]],
) -> None:
    history = session
    loads = Loads(console)
    page = sign_in(console, f"#/s/{SID}")
    rows = page.get_by_test_id("message-list").locator("[data-testid=message]")
    page.get_by_test_id("message-list").get_by_text("turn 0 answered").wait_for(timeout=30_000)
    stream_live(page)  # the events the stream replays as it opens are in
    start = loads.mark()
    opening = (start, loads.full(), loads.bytes())
    busy = loads.busy()
    shown = rows.count()

    # agent turns, each one tool round, and a burst of the events a busy session streams
    with api(console_proxy) as h:
        for turn in range(1, 4):
            fake_upstream.script(reply(f"turn {turn} answered"))
            history.append({"role": "user", "content": f"go on with step {turn}"})
            resp = h.post(f"/s/{SID}/v1/chat/completions", json={"model": "m", "messages": history})
            assert resp.status_code == 200, resp.text
            history.append({"role": "assistant", "content": f"turn {turn} answered"})
            burst(db_dsn, ["context.usage", "session.message.appended"] * 5)
    page.get_by_test_id("message-list").get_by_text("turn 3 answered").wait_for()
    wait_for(lambda: rows.count() == shown + 6, page)
    # a fixed wait: the loads a burst queued have no last one to wait for (a measure)
    page.wait_for_timeout(500)
    during = (len(loads.responses) - start, loads.full(start), loads.bytes(start))
    print(
        f"\nmessage loads (requests, whole, bytes): opening {opening}, burst {during};"
        f" main thread busy (ms): opening {busy:.0f}, burst {loads.busy() - busy:.0f}"
    )
    assert shown == WINDOW, "the first load shows the last rows only"
    assert int(rows.first.get_attribute("data-pos") or 0) >= TARGET - WINDOW
    assert opening[1] == 1, "the events replayed as the stream opened reloaded it whole"
    assert loads.full(start) == 0, "a live event read the whole window again"
    # some forty events: a burst loads while one load runs and once after it, not once each
    assert len(loads.responses) - start <= 20, len(loads.responses) - start
    assert loads.bytes(start) < opening[2] / 20, (during, opening)
    assert rows.count() == shown + 6
    assert rows.last.inner_text().count("turn 3 answered") == 1

    # an earlier row cleared in place: the one load that shows it reads the window again
    tool = rows.locator("xpath=self::*[@data-role='tool']").first
    pos = int(tool.get_attribute("data-pos") or 0)
    evicted = page.locator(f"[data-testid=message][data-pos='{pos}'] [data-mark=evicted]")
    assert evicted.count() == 0
    mark = loads.mark()
    evict(db_dsn, pos)
    evicted.wait_for()
    page.wait_for_timeout(300)  # fixed: a second whole load would have no event to come after
    assert loads.full(mark) == 1
    assert rows.count() == shown + 6


def test_an_edited_history_replaces_the_rows_it_superseded(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream
) -> None:
    """A client that sends the history again with its tail changed supersedes the stored
    tail: the rows after the last one shown are then not what changed, and the list shows
    the new tail, not the old one beside it."""
    asked = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]

    def chat(question: str, answer: str) -> None:
        fake_upstream.script(reply(answer))
        with api(console_proxy) as h:
            resp = h.post(
                "/s/edited/v1/chat/completions",
                json={"model": "m", "messages": [*asked, {"role": "user", "content": question}]},
            )
            assert resp.status_code == 200, resp.text

    chat("question A", "answer A")
    page = sign_in(console, "#/s/edited")
    listed = page.get_by_test_id("message-list")
    listed.get_by_text("answer A").wait_for()
    chat("question B", "answer B")  # the same length of history, its last message edited
    listed.get_by_text("answer B").wait_for()
    listed.get_by_text("question A").wait_for(state="detached")
    bodies = page.locator("[data-testid=message] .body").all_inner_texts()
    assert bodies == ["hi", "ok", "question B", "answer B"]


@pytest.mark.parametrize("failing", [False, True], ids=["live", "after-failed-loads"])
def test_an_observation_rewritten_under_its_reply_shows_rewritten(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream, db_dsn: str, failing: bool
) -> None:
    """A text-action agent sends a tool's output as a user message; the step after the one
    it came in, under the reply to it, cuts it in place (its only event a
    ``context.truncated``), and the list shows it cut: at once, or, when the loads its
    events made failed, at the first load that succeeds after them.

    The loads fail until the view has caught up with every event of the step: the reply's
    come once it is stored, after the answer, so they are followed by a marker (an event
    that only sets the status line), and once it shows, the list's loads have run when it
    is no longer busy (``aria-busy``)."""
    output = "".join(f"Observation: line {n:05d} of the listing\n" for n in range(1500))
    sent = [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": "Action: ls"},
        {"role": "user", "content": output},
    ]

    def step(answer: str) -> None:
        fake_upstream.script(reply(answer))
        with api(console_proxy) as h:
            resp = h.post("/s/observed/v1/chat/completions", json={"model": "m", "messages": sent})
            assert resp.status_code == 200, resp.text
        sent.append({"role": "assistant", "content": answer})

    step("Action: cat f.txt")
    page = sign_in(console, "#/s/observed")
    rows = page.get_by_test_id("message")
    listed = page.get_by_test_id("message-list")
    listed.get_by_text("Action: cat f.txt").wait_for()
    observation = page.locator("[data-testid=message][data-pos='2']")
    assert observation.locator("[data-mark=truncated]").count() == 0
    messages = "**/v1/sessions/observed/messages?*"
    if failing:
        page.route(messages, lambda route: route.fulfill(status=503, json={"error": {}}))
    sent.append({"role": "user", "content": "Observation: hello"})
    step("Action: done")
    if failing:
        with api(console_proxy) as h:
            replied(h, "observed")  # the step's events are all stored, the reply's last
        inject(db_dsn, "observed", "context.compaction.started", {})
        page.get_by_test_id("status-line").filter(has_text="Compacting").wait_for()
        page.locator("[data-testid=message-list]:not([aria-busy])").wait_for()
        assert page.get_by_test_id("toast").filter(has_text="Could not load the session").count()
        assert listed.get_by_text("Action: done").count() == 0  # every load failed
        page.unroute(messages)
        inject(db_dsn, "observed", "context.usage", {})
    listed.get_by_text("Action: done").wait_for()
    observation.locator("[data-mark=truncated]").wait_for()
    assert rows.count() == 6


def _medium(console_proxy: Any, fake_upstream: FakeUpstream, sid: str, rounds: int) -> None:
    """A session of ``3 * rounds + 2`` rows: a system message, tool rounds and a reply."""
    history = [{"role": "system", "content": "You are a coding agent."}]
    history += [m for i in range(rounds) for m in tool_round(i, 200)]
    fake_upstream.script(reply("the last reply"))
    with api(console_proxy) as h:
        resp = h.post(f"/s/{sid}/v1/chat/completions", json={"model": "m", "messages": history})
        assert resp.status_code == 200, resp.text
        replied(h, sid)  # the console counts the reply, stored just after its answer


def _in_view(locator: Any) -> bool:
    return bool(
        locator.evaluate(
            "(n) => { const r = n.getBoundingClientRect();"
            " return r.top >= 0 && r.bottom <= window.innerHeight + 1; }"  # a sub-pixel over
        )
    )


def test_a_long_session_opens_on_its_last_rows_and_loads_earlier_ones_from_the_keyboard(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream
) -> None:
    """The first load asks for and shows the last WINDOW rows, scrolled to the newest, by the
    composer, the usage panel still in sight; a turn fetches only the rows after the last one,
    the page following them down; "load earlier" (Enter on it, the focus staying on it) adds
    the WINDOW rows before them, in order, then the rest, and goes when none is left, its focus
    to the first row."""
    sid = "medium"
    _medium(console_proxy, fake_upstream, sid, 150)  # 452 rows
    asked: list[str] = []
    console.page.on(
        "request",
        lambda r: asked.append(r.url) if f"/v1/sessions/{sid}/messages?" in r.url else None,
    )
    page = sign_in(console, f"#/s/{sid}")
    rows = page.get_by_test_id("message-list").locator("[data-testid=message]")
    page.get_by_test_id("message-list").get_by_text("the last reply").wait_for()
    earlier = page.get_by_test_id("load-earlier")
    earlier.filter(has_text="(252 not shown)").wait_for()
    assert rows.count() == WINDOW
    assert "offset=252" in asked[0], asked  # the window only, then the rows after it
    assert all(int(re.findall(r"offset=(\d+)", u)[0]) >= 252 for u in asked), asked
    # rows scrolled into sight take their height a frame or two after the scroll (app.css)
    wait_for(lambda: _in_view(rows.last) and _in_view(page.get_by_test_id("composer-input")), page)
    assert _in_view(page.get_by_test_id("usage-text")), "the usage panel stays in sight"

    mark = len(asked)
    fake_upstream.script(reply("one more"))
    with api(console_proxy) as h:
        sent = h.get(f"/v1/sessions/{sid}/messages?form=sent&limit=1000").json()["data"]
        history = [r["message"] for r in sent] + [{"role": "user", "content": "and then?"}]
        resp = h.post(f"/s/{sid}/v1/chat/completions", json={"model": "m", "messages": history})
        assert resp.status_code == 200, resp.text
    page.get_by_test_id("message-list").get_by_text("one more").wait_for()
    assert rows.count() == WINDOW + 2
    assert "offset=451" in asked[mark], asked[mark:]  # the rows after the last one held
    assert all(int(re.findall(r"offset=(\d+)", u)[0]) >= 451 for u in asked[mark:]), asked
    wait_for(lambda: _in_view(rows.last), page)

    earlier.focus()
    page.keyboard.press("Enter")
    earlier.filter(has_text="(52 not shown)").wait_for()
    assert rows.count() == 2 * WINDOW + 2
    assert page.evaluate("document.activeElement.dataset.testid") == "load-earlier"
    page.keyboard.press("Enter")
    earlier.wait_for(state="hidden")
    # its focus goes to the first row it added, not to the page's body with the hidden button
    wait_for(lambda: page.evaluate("document.activeElement.dataset.pos") == "0", page)
    positions = [int(p) for p in rows.evaluate_all("(ns) => ns.map((n) => n.dataset.pos)")]
    assert positions == list(range(454))
    assert [u for u in asked if "limit=200&offset=52" in u]
    assert [u for u in asked if "limit=52&offset=0" in u]


def test_rows_evicted_while_the_stream_was_down_show_once_it_reconnects(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """``context.evicted`` is transient: a stream reconnecting with Last-Event-ID is not sent
    one it missed. Reconnected, the page reads the rows it shows again, and a result cleared
    while it was away shows cleared."""
    sid = "medium"
    _medium(console_proxy, fake_upstream, sid, 80)  # 242 rows: the window is the last 200
    down = {"on": False}

    def events(route: Any) -> None:
        if down["on"]:
            route.abort()
        else:
            route.continue_()

    page = sign_in(console, f"#/s/{sid}")
    page.get_by_test_id("message-list").get_by_text("the last reply").wait_for()
    page.route(f"**/v1/sessions/{sid}/events", events)
    pos = 201  # a tool result (the 67th round's) in the window
    row = page.locator(f"[data-testid=message][data-pos='{pos}']")
    assert row.get_attribute("data-role") == "tool"
    down["on"] = True
    page.evaluate("window.stop()")  # the open stream is cut; the next tries fail
    page.get_by_test_id("toast").filter(has_text="live updates stopped").wait_for()

    async def work(pool: asyncpg.Pool) -> None:
        await pool.execute(
            "UPDATE messages SET evicted_at = now() WHERE tenant = $1 AND session_id = $2"
            " AND pos = $3 AND superseded_at IS NULL",
            TENANT,
            sid,
            pos,
        )

    _on_db(db_dsn, work)
    down["on"] = False
    page.get_by_test_id("toast").filter(has_text="Live updates are back").wait_for()
    row.locator("[data-mark=evicted]").wait_for()


def test_earlier_rows_are_not_dropped_by_a_reload_that_was_under_way(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """ "Load earlier" pressed while the window is being read again (an eviction's reload,
    held here at its first request) waits for that reload: run beside it, its rows were
    added, then replaced by the smaller window the reload had set out to read."""
    sid = "medium"
    _medium(console_proxy, fake_upstream, sid, 150)  # 452 rows
    page = sign_in(console, f"#/s/{sid}")
    rows = page.get_by_test_id("message-list").locator("[data-testid=message]")
    earlier = page.get_by_test_id("load-earlier")
    earlier.filter(has_text="(252 not shown)").wait_for()
    held: list[Any] = []

    def hold(route: Any) -> None:  # the first one only
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route(f"**/v1/sessions/{sid}", hold)
    inject(db_dsn, sid, "context.evicted", {"count": 1})
    wait_for(lambda: len(held) == 1, page)
    earlier.click()  # its handler runs as the click is dispatched: it waits for the reload
    held[0].continue_()
    earlier.filter(has_text="(52 not shown)").wait_for()
    wait_for(lambda: not page.evaluate("document.getElementById('message-list').ariaBusy"), page)
    assert rows.count() == 2 * WINDOW
    assert earlier.inner_text().endswith("(52 not shown)")
