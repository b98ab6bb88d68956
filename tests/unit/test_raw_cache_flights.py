"""``services.raw_cache``: reads of one output and version that come while its text is being
redacted wait for that redaction instead of each making its own, and a redaction every
reader left is dropped."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from proxy import work_threads
from proxy.cascade.redaction import redact
from proxy.services import raw_cache
from tests.unit.raw_reads import stub_reads

PATTERNS = (re.compile("secret"),)


class Slow:
    """``redact`` that waits for ``go`` on its page thread, its calls counted."""

    def __init__(self) -> None:
        self.calls = 0
        self.go = threading.Event()

    def __call__(self, text: str, patterns: Any) -> tuple[str, int]:
        self.calls += 1
        assert self.go.wait(5)
        return redact(text, patterns)


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> Iterator[Slow]:
    async def version(conn: Any, **where: Any) -> str:
        return "v1"

    async def fetch(conn: Any, **where: Any) -> dict[str, Any]:
        return {"content": "a secret here", "original_bytes": 13, "capped": False}

    stub_reads(monkeypatch, fetch, version)
    slow = Slow()
    monkeypatch.setattr(raw_cache, "redact", slow)
    raw_cache.clear()
    yield slow
    slow.go.set()
    raw_cache.clear()


def _read() -> asyncio.Task[Any]:
    return asyncio.create_task(
        raw_cache.read_output(None, tenant="t", session_id="s", tool_call_id="c", patterns=PATTERNS)
    )


async def _until(test: Any) -> None:
    for _ in range(500):
        if test():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("never")


async def test_reads_while_a_redaction_is_under_way_wait_for_it(slow: Slow) -> None:
    first = _read()
    await _until(lambda: slow.calls == 1)
    second = _read()
    await asyncio.sleep(0.01)
    slow.go.set()
    outs = await asyncio.gather(first, second)
    assert [o.content for o in outs] == ["a [REDACTED] here"] * 2
    assert slow.calls == 1


async def test_a_reader_gone_leaves_the_redaction_to_the_other(slow: Slow) -> None:
    first = _read()
    await _until(lambda: slow.calls == 1)
    second = _read()
    await asyncio.sleep(0.01)
    first.cancel()
    await asyncio.sleep(0.01)
    slow.go.set()
    assert (await second).content == "a [REDACTED] here"
    assert slow.calls == 1 and first.cancelled()


async def test_a_begun_redaction_every_reader_left_is_joined_by_the_next_read(
    slow: Slow,
) -> None:
    # the page thread cannot be stopped: a client that gives up and asks again waits for it
    first = _read()
    await _until(lambda: slow.calls == 1)
    first.cancel()
    await asyncio.sleep(0.01)
    later = _read()
    await asyncio.sleep(0.01)
    slow.go.set()
    assert (await later).content == "a [REDACTED] here"
    assert slow.calls == 1 and first.cancelled()
    assert not raw_cache._FLIGHTS


@pytest.fixture
def busy() -> Iterator[threading.Event]:
    """Both page threads held until the event is set: a redaction asked meanwhile is queued."""
    free = threading.Event()
    held = [work_threads.PAGES.submit(free.wait, 5) for _ in range(2)]
    yield free
    free.set()
    for h in held:
        h.result(5)


async def test_queued_redactions_every_reader_left_are_never_made(
    slow: Slow, busy: threading.Event
) -> None:
    reads = [_read() for _ in range(50)]
    await asyncio.sleep(0.01)
    for r in reads:
        r.cancel()
    await asyncio.gather(*reads, return_exceptions=True)
    assert not raw_cache._FLIGHTS
    busy.set()
    slow.go.set()
    await asyncio.sleep(0.05)
    assert slow.calls == 0


async def test_a_redactions_error_reaches_every_reader_and_leaves_no_flight(
    slow: Slow, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(text: str, patterns: Any) -> tuple[str, int]:
        slow.calls += 1
        assert slow.go.wait(5)
        raise ValueError("no")

    monkeypatch.setattr(raw_cache, "redact", fails)
    reads = [_read() for _ in range(3)]
    await _until(lambda: slow.calls == 1)
    await asyncio.sleep(0.01)
    slow.go.set()
    outs = await asyncio.gather(*reads, return_exceptions=True)
    assert [type(o) for o in outs] == [ValueError] * 3 and slow.calls == 1
    assert not raw_cache._FLIGHTS


async def test_tenants_never_share_a_redaction(slow: Slow, monkeypatch: pytest.MonkeyPatch) -> None:
    async def fetch(conn: Any, **where: Any) -> dict[str, Any]:
        text = f"secret of {where['tenant']}"
        return {"content": text, "original_bytes": len(text), "capped": False}

    async def version(conn: Any, **where: Any) -> str:
        return "v1"

    stub_reads(monkeypatch, fetch, version)
    a, b = (
        asyncio.create_task(
            raw_cache.read_output(
                None, tenant=t, session_id="s", tool_call_id="c", patterns=PATTERNS
            )
        )
        for t in ("A", "B")
    )
    await asyncio.sleep(0.01)
    slow.go.set()
    outs = await asyncio.gather(a, b)
    assert [o.content for o in outs] == ["[REDACTED] of A", "[REDACTED] of B"]
    assert slow.calls == 2
