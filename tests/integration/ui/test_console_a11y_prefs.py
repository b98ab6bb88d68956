"""The console for people who set their system otherwise or listen to it: a burst of events
is not a burst of announcements, asked for less motion nothing moves, and in forced colors
(high contrast) the usage bar still shows its parts.

The ``console`` fixture checks that the page raised no error and asked no host but the proxy.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

import pytest

from proxy.store.db import create_pool
from proxy.store.events import insert_event
from tests.integration.api.conftest import ProxyServer
from tests.integration.conftest import run_sync
from tests.integration.ui.conftest import TENANT, Page
from tests.integration.ui.test_console import posted, sign_in
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)

# each live region's text, sampled once a frame (what a screen reader can be told of): each
# change seen is one announcement queued; `window.gaps` holds the time between a region's
# changes, `window.said` how many there were
_LISTEN = """() => {
  window.said = 0;
  window.gaps = [];
  const last = new Map(); // region -> [text, when it changed]
  const look = (now) => {
    for (const n of document.querySelectorAll("[aria-live], [role=status], [role=alert]")) {
      const was = last.get(n);
      if (was && was[0] !== n.textContent && n.textContent !== "") {
        window.said += 1;
        if (was[1] !== null) window.gaps.push(now - was[1]);
      }
      if (!was || was[0] !== n.textContent) last.set(n, [n.textContent, was ? now : null]);
    }
    requestAnimationFrame(look);
  };
  requestAnimationFrame(look);
}"""


def burst(db_dsn: str, session_id: str, events: list[tuple[str, dict[str, Any]]]) -> None:
    """``events`` persisted one after another, each NOTIFYing as it is stored."""

    async def go() -> None:
        pool = await create_pool(db_dsn, min_size=1, max_size=1)
        try:
            for name, data in events:
                await insert_event(
                    pool,
                    tenant=TENANT,
                    session_id=session_id,
                    name=name,
                    data={"session_id": session_id, **data},
                )
        finally:
            await pool.close()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(run_sync, go()).result(timeout=20)


def test_a_burst_of_a_hundred_events_is_a_few_announcements_and_says_the_last(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """Fifty compactions (started, completed) and fifty handoff nudges, each a new fraction:
    the status line and the handoff toast (live regions) changed with each, as many
    announcements queued as frames drawn; each says at most one text a second, and the last
    stands."""
    started(console_proxy, "chatty")
    page = sign_in(console, "#/s/chatty")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    page.evaluate(_LISTEN)
    events: list[tuple[str, dict[str, Any]]] = []
    for i in range(50):
        events.append(("context.compaction.started", {"trigger": "soft"}))
        events.append(
            (
                "context.compaction.completed",
                {"tokens_before": 9000 + i, "tokens_after": 1000 + i},
            )
        )
        events.append(("context.handoff_suggested", {"fraction": (i + 1) / 100}))
    began = time.monotonic()
    burst(db_dsn, "chatty", events)
    page.get_by_test_id("status-line").filter(has_text="9,049 → 1,049 tokens").wait_for()
    page.get_by_test_id("toast").filter(has_text="(50% full)").wait_for()
    said, gaps = page.evaluate("[window.said, window.gaps]")
    # a few: each of the two regions at most once a second while the burst lasted (however
    # long it took this machine), and its last; not one for each event, nor for each frame
    took = time.monotonic() - began
    assert said <= 2 * (took + 2), (said, took)
    assert min(gaps, default=1000) > 800, gaps  # one text a second at most, per region


def _style(page: Any, within_bar: str, prop: str) -> str:
    """A computed style of the usage bar (or its first part matching ``within_bar``), read
    where it is found: a load draws the bar's parts again, and a part no longer in the page
    has no style."""
    return str(
        page.evaluate(
            "([sel, prop]) => getComputedStyle(document.querySelector(sel))[prop]",
            [f"#usage-bar {within_bar}".strip(), prop],
        )
    )


def test_asked_for_less_motion_the_usage_bar_does_not_animate(
    console: Page, console_proxy: ProxyServer
) -> None:
    posted(console_proxy, "still", [{"role": "user", "content": "hi"}])
    page = console.page
    page.emulate_media(reduced_motion="reduce")
    sign_in(console, "#/s/still")
    page.locator("#usage-bar .seg").first.wait_for(state="attached")
    assert _style(page, ".seg", "transitionDuration") == "0s"
    page.emulate_media(reduced_motion="no-preference")
    assert _style(page, ".seg", "transitionDuration") != "0s"


def test_in_forced_colors_the_usage_bar_keeps_its_colours_and_an_edge(
    console: Page, console_proxy: ProxyServer
) -> None:
    posted(console_proxy, "contrast", [{"role": "user", "content": "hi"}])
    page = console.page
    page.emulate_media(forced_colors="active")
    sign_in(console, "#/s/contrast")
    page.locator("#usage-bar .seg-messages").wait_for()
    assert _style(page, ".seg-messages", "backgroundColor") == "rgb(47, 93, 138)"
    assert _style(page, "", "borderTopStyle") == "solid"
