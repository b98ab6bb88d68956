"""The console's work per live event as the rows shown grow: on a session of some 3,900
messages with thousands of them loaded ("load earlier"), a streamed delta, an eviction and a
press of "load earlier" cost about what they cost on the first window. Bounded in counts
(rows read, list items built, layout objects visited, from chromium's trace), never time."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import replied
from tests.integration.ui.conftest import ROOMY, Page
from tests.integration.ui.test_console import (
    api,
    inject,
    sign_in,
    stream_live,
    tool_round,
    wait_for,
)
from tests.integration.ui.test_console_events import evict_row

pytestmark = [pytest.mark.timeout(60), ROOMY]

SID = "rows-shown"
ROUNDS = 1300  # three rows each, after the system message
WINDOW = 200  # rows.js: the rows a first load shows, and each "load earlier" adds
TRACED = ["devtools.timeline", "disabled-by-default-devtools.timeline"]


class Reads:
    """The rows each read of the session's messages brought."""

    def __init__(self, console: Page) -> None:
        self.rows: list[int] = []
        console.page.on("response", self._seen)

    def _seen(self, response: Any) -> None:
        if f"/v1/sessions/{SID}/messages?" in response.url:
            self.rows.append(len(response.json()["data"]))


def layout_work(page: Any, act: Callable[[], None]) -> dict[str, int]:
    """What `act` cost the page in style and layout, from chromium's trace: the elements
    restyled, the layouts run and the layout objects they visited."""
    browser = page.context.browser
    browser.start_tracing(page=page, categories=TRACED)
    act()
    page.evaluate("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
    trace = json.loads(browser.stop_tracing())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    out = {"styled": 0, "layouts": 0, "visited": 0}
    for event in events:
        args = event.get("args", {})
        if event.get("name") == "UpdateLayoutTree" and "elementCount" in args:
            out["styled"] += args["elementCount"]
        if event.get("name") == "Layout" and "beginData" in args:
            out["layouts"] += 1
            out["visited"] += args["beginData"].get("totalObjects", 0)
    return out


def shown(page: Any) -> int:
    return int(page.evaluate("document.querySelectorAll('#message-list > li').length"))


def settled(page: Any) -> None:
    wait_for(lambda: not page.evaluate("document.getElementById('message-list').ariaBusy"), page)


def step(console_proxy: Any, fake_upstream: FakeUpstream, sent: list[Any], answer: str) -> None:
    """One turn sending `sent` (the whole history), answered with `answer`, added to it."""
    fake_upstream.script(reply(answer))
    with api(console_proxy) as h:
        resp = h.post(f"/s/{SID}/v1/chat/completions", json={"model": "m", "messages": sent})
        assert resp.status_code == 200, resp.text
        replied(h, SID)
    sent.append({"role": "assistant", "content": answer})


def open_long(
    console: Page,
    console_proxy: Any,
    fake_upstream: FakeUpstream,
    rows: int,
    history: list[Any] | None = None,
) -> Any:
    """The session, opened with at least `rows` rows loaded; `history`, when given, gets what
    was sent, to extend."""
    sent = history if history is not None else []
    sent += [{"role": "system", "content": "You are a coding agent."}]
    sent += [m for i in range(ROUNDS) for m in tool_round(i, 200)]
    step(console_proxy, fake_upstream, sent, "done")
    page = sign_in(console, f"#/s/{SID}")
    page.get_by_test_id("message-list").get_by_text("done").wait_for()
    stream_live(page)  # the events the stream replays as it opens are in
    settled(page)
    while shown(page) < rows:
        before = shown(page)
        page.get_by_test_id("load-earlier").click()
        wait_for(lambda b=before: shown(page) > b, page)
        settled(page)
    return page


# counts the items added to the message list
ADDED = """
window.itemsAdded = 0;
new MutationObserver((records) => {
  for (const r of records) window.itemsAdded += r.addedNodes.length;
}).observe(document.getElementById("message-list"), { childList: true });
"""


def streamed(page: Any) -> str:
    return str(
        page.evaluate(
            "(document.querySelector('[data-testid=message-streaming] pre') || {}).textContent"
        )
        or ""
    )


def test_a_delta_lays_out_each_row_shown_as_one_box_at_most(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """A row out of sight is a box of its own size to a layout of the list (its contents
    are skipped), so a delta streamed under thousands of rows visits about one object per
    row, where laying out every row's contents visited some nine."""
    page = open_long(console, console_proxy, fake_upstream, 2000)
    rows = shown(page)

    def deltas() -> None:
        for i in range(5):
            inject(db_dsn, SID, "session.message.delta.appended", {"delta": f"tok{i} "})
        wait_for(lambda: "tok4" in streamed(page), page)

    work = layout_work(page, deltas)
    print(f"\n5 deltas under {rows} rows: {work}")
    assert work["layouts"] >= 1
    assert work["visited"] / work["layouts"] < 2 * rows, (work, rows)


def test_an_eviction_reads_again_the_rows_from_the_first_it_names_on(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """`context.evicted` names the results it cleared (`handles`): the view reads again the
    rows from the first of those it shows on, and builds again only the items that changed,
    not the thousand rows loaded before them."""
    reads = Reads(console)
    page = open_long(console, console_proxy, fake_upstream, 1000)
    rows = shown(page)
    tool = page.locator("#message-list > li[data-role=tool]").last
    pos = int(tool.get_attribute("data-pos") or 0)
    call = tool.get_attribute("data-tool-call-id")
    page.evaluate(ADDED)
    mark = len(reads.rows)
    evict_row(db_dsn, SID, pos)
    inject(db_dsn, SID, "context.evicted", {"count": 1, "handles": [f"{call}@{pos}"]})
    page.locator(f"#message-list > li[data-pos='{pos}'] [data-mark=evicted]").wait_for()
    settled(page)
    read = reads.rows[mark:]
    added = page.evaluate("window.itemsAdded")
    print(f"\neviction under {rows} rows: reads {read}, items added {added}")
    assert shown(page) == rows
    assert sum(read) <= 10, read
    assert added <= 3, added


# counts the nodes added anywhere in the message list, and the characters written to its text
WRITES = """
window.nodesAdded = 0;
window.charsWritten = 0;
const count = (n) => { window.charsWritten += n.textContent.length; };
new MutationObserver((records) => {
  for (const r of records) {
    window.nodesAdded += r.addedNodes.length;
    r.addedNodes.forEach(count);
    if (r.type === "characterData") window.charsWritten += r.target.length - r.oldValue.length;
  }
}).observe(document.getElementById("message-list"),
  { childList: true, subtree: true, characterData: true, characterDataOldValue: true });
"""


def five_deltas_after(page: Any, db_dsn: str, reply_so_far: str, delta: str) -> list[int]:
    """Streams ``reply_so_far`` into a reply, then five deltas (``delta`` with 0..4 put in):
    the nodes the five added to the message list and the characters they wrote to it."""
    inject(db_dsn, SID, "session.message.delta.appended", {"delta": reply_so_far})
    wait_for(lambda: len(streamed(page)) == len(reply_so_far), page)
    page.evaluate(WRITES)
    for i in range(5):
        inject(db_dsn, SID, "session.message.delta.appended", {"delta": delta.format(i)})
    wait_for(lambda: delta.format(4) in streamed(page), page)
    return list(page.evaluate("[window.nodesAdded, window.charsWritten]"))


def test_a_delta_writes_its_own_text_not_the_whole_reply_again(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """A long reply streams in as thousands of deltas: each one appends its text to the item
    shown, where building the item again wrote the whole reply so far, each time."""
    page = open_long(console, console_proxy, fake_upstream, 0)
    written = five_deltas_after(page, db_dsn, "x" * 20_000, "tok{} ")
    print(f"\n5 deltas on a 20,000-character reply: nodes added, characters written {written}")
    assert written[0] == 0, written
    assert written[1] == len("tok0 ") * 5, written


def test_a_long_streaming_text_goes_on_in_pieces_a_delta_lays_out_alone(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """Appended to one text, a delta has the layout place the whole reply's lines again:
    past PIECE_CHARS (live.js) the text goes on, at a line break, in a new piece (a block of
    its own), and the next deltas go into that one."""
    page = open_long(console, console_proxy, fake_upstream, 0)
    written = five_deltas_after(page, db_dsn, "a line\n" * 3000, "tok{}\n")
    last = page.evaluate(
        "document.querySelector('[data-testid=message-streaming] pre').lastChild.textContent"
    )
    assert written == [1, len("tok0\n") * 5], written
    assert last == "tok1\ntok2\ntok3\ntok4\n"


def test_an_observation_cut_in_place_reads_again_the_rows_from_it_on(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream
) -> None:
    """A tool's output sent as a user message is cut in place the step after it came, its
    only word a `context.truncated` naming it: the view reads again the rows from it on and
    builds again the items that changed, not the thousand rows loaded before it."""
    reads = Reads(console)
    sent: list[Any] = []
    page = open_long(console, console_proxy, fake_upstream, 1000, sent)
    output = "".join(f"Observation: line {n:05d} of the listing\n" for n in range(1500))
    sent += [{"role": "user", "content": "list the files"}]
    step(console_proxy, fake_upstream, sent, "Action: ls")
    sent += [{"role": "user", "content": output}]
    step(console_proxy, fake_upstream, sent, "Action: cat f.txt")
    page.get_by_test_id("message-list").get_by_text("Action: cat f.txt").wait_for()
    settled(page)
    observation = page.locator("#message-list > li[data-role=user]").last
    pos = observation.get_attribute("data-pos")
    assert observation.locator("[data-mark=truncated]").count() == 0
    rows = shown(page)
    page.evaluate(ADDED)
    mark = len(reads.rows)
    sent += [{"role": "user", "content": "Observation: hello"}]
    step(console_proxy, fake_upstream, sent, "Action: done")
    page.locator(f"#message-list > li[data-pos='{pos}'] [data-mark=truncated]").wait_for()
    page.get_by_test_id("message-list").get_by_text("Action: done").wait_for()
    settled(page)
    read = reads.rows[mark:]
    added = page.evaluate("window.itemsAdded")
    print(f"\nobservation cut under {rows} rows: reads {read}, items added {added}")
    assert shown(page) == rows + 2
    assert sum(read) <= 20, read
    assert added <= 6, added
