"""``client_form.hashes_to``: a long message is hashed on the hash threads
(``proxy.work_threads.HASHES``), never on the loop's default executor (a query embedding and
DNS lookups run there) nor behind the page threads' greps, and "long" counts every text the
canonical form writes, a tool call's arguments too."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from proxy import work_threads
from proxy.history import chain_hash
from proxy.store import client_form

LONG = "x" * (client_form.ON_LOOP_CHARS + 1)


def _call(arguments: str) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


async def test_a_long_hash_does_not_queue_on_the_default_executor() -> None:
    loop = asyncio.get_running_loop()
    busy, release = ThreadPoolExecutor(max_workers=1), threading.Event()
    loop.set_default_executor(busy)
    blocker = loop.run_in_executor(None, release.wait, 5)  # the default executor's one thread
    msg = {"role": "tool", "tool_call_id": "c1", "content": LONG}
    try:
        ok = await asyncio.wait_for(
            client_form.hashes_to(["p"], msg, chain_hash("p", msg)), timeout=1.0
        )
    finally:
        release.set()
        await blocker
    assert ok


def _threads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each hash ``client_form`` makes runs on the main thread, in order."""
    on_main: list[bool] = []
    write = client_form.hashes_after

    def hashes_after(prevs: Any, m: Any, target: str) -> bool:
        on_main.append(threading.current_thread() is threading.main_thread())
        return write(prevs, m, target)

    monkeypatch.setattr(client_form, "hashes_after", hashes_after)
    return on_main


@pytest.mark.parametrize(
    "msg",
    [
        _call(LONG),
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": LONG}]},
    ],
    ids=["tool-call-arguments", "content-parts"],
)
async def test_a_long_text_anywhere_in_the_message_is_hashed_off_the_loop(
    msg: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    on_main = _threads(monkeypatch)
    assert await client_form.hashes_to(["p"], msg, chain_hash("p", msg))
    assert not await client_form.hashes_to(["p"], msg, chain_hash("q", msg))
    assert on_main == [False, False]


async def test_a_short_message_is_hashed_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    on_main = _threads(monkeypatch)
    msg = _call("{}") | {"content": [{"type": "text", "text": "short"}]}
    assert await client_form.hashes_to(["p"], msg, chain_hash("p", msg))
    assert on_main == [True]


async def test_a_long_hash_does_not_queue_behind_a_burst_of_pages() -> None:
    """A pinned read of a long result (a chat turn's read_tool_output) is hashed while both
    page threads grep: a burst of greps of megabytes each, which the two run one after
    another, never holds a hash on the request path until the burst is done."""
    release = threading.Event()
    greps = [
        asyncio.ensure_future(work_threads.off_loop(work_threads.PAGES, release.wait, 5))
        for _ in range(8)
    ]
    await asyncio.sleep(0.05)
    msg = {"role": "tool", "tool_call_id": "c1", "content": LONG}
    try:
        ok = await asyncio.wait_for(
            client_form.hashes_to(["p"], msg, chain_hash("p", msg)), timeout=1.0
        )
    finally:
        release.set()
        await asyncio.gather(*greps)
    assert ok
