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


async def test_a_redaction_every_reader_left_is_not_waited_for(slow: Slow) -> None:
    first = _read()
    await _until(lambda: slow.calls == 1)
    first.cancel()
    await asyncio.sleep(0)
    later = _read()  # not the dropped redaction: its own
    await _until(lambda: slow.calls == 2)
    slow.go.set()
    assert (await later).content == "a [REDACTED] here"
    assert first.cancelled()
