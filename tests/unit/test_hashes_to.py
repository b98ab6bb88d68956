"""``client_form.hashes_to``: a long message is hashed on the work threads the pages also
run on (``proxy.work_threads``), never on the loop's default executor (a query embedding and
DNS lookups run there), and "long" counts every text the canonical form writes, a tool
call's arguments too."""

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


async def test_a_long_hash_runs_on_the_work_threads_the_pages_run_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One pool of two for all the proxy's long CPU work, not a pool each for the store's
    hashes and the services' pages: each holds the interpreter's lock as it runs."""
    names: list[str] = []
    write = client_form.hashes_after

    def hashes_after(prevs: Any, m: Any, target: str) -> bool:
        names.append(threading.current_thread().name)
        return write(prevs, m, target)

    monkeypatch.setattr(client_form, "hashes_after", hashes_after)
    msg = {"role": "tool", "tool_call_id": "c1", "content": LONG}
    assert await client_form.hashes_to(["p"], msg, chain_hash("p", msg))
    page = await work_threads.off_loop(lambda: threading.current_thread().name)
    assert page.startswith(work_threads.THREAD_PREFIX)
    assert [n.split("_")[0] for n in names] == [work_threads.THREAD_PREFIX]
