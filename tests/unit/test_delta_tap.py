"""DeltaTap: publishes only while watched, catches a late watcher up, and never lets a failed
NOTIFY reach the stream it follows."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from proxy.bus import EventBus
from proxy.chunks import StreamAccumulator
from proxy.services import deltas
from proxy.services.deltas import DeltaTap


class _Bus(EventBus):
    def __init__(self) -> None:
        super().__init__(None, "postgresql://127.0.0.1/x")  # type: ignore[arg-type]
        self.on = False

    def watched(self, key: tuple[str, str]) -> bool:
        return self.on


class _Pool:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.sent: list[dict[str, Any]] = []

    async def execute(self, sql: str, channel: str, payloads: list[str]) -> None:
        if self.fail:
            raise OSError("connection lost")
        self.sent.extend(json.loads(p)["d"] for p in payloads)


def _text(acc: StreamAccumulator, text: str) -> None:
    acc.add({"choices": [{"index": 0, "delta": {"content": text}}]})


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deltas, "FLUSH_INTERVAL", 0.02)


async def test_text_from_before_anyone_watched_goes_out_with_the_first_delta() -> None:
    bus, pool = _Bus(), _Pool()
    tap = DeltaTap(bus, pool, "t", "s")  # type: ignore[arg-type]
    acc = StreamAccumulator()
    tap.round(acc)
    _text(acc, "one ")
    tap.poll()  # nobody watches: nothing starts
    await asyncio.sleep(0.05)
    assert pool.sent == []
    bus.on = True
    _text(acc, "two ")
    tap.poll()
    await asyncio.sleep(0.05)
    second = StreamAccumulator()  # a later round (read_tool_output)
    tap.round(second)
    _text(second, "three")
    await tap.close()
    assert "".join(d["delta"] for d in pool.sent) == "one two three"
    assert pool.sent[0]["delta"] == "one two "


async def test_a_failing_notify_is_logged_once_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus, pool = _Bus(), _Pool(fail=True)
    bus.on = True
    tap = DeltaTap(bus, pool, "t", "s")  # type: ignore[arg-type]
    acc = StreamAccumulator()
    tap.round(acc)
    with caplog.at_level(logging.WARNING, logger="cascade.deltas"):
        for word in ("a", "b", "c"):
            _text(acc, word)
            tap.poll()
            await asyncio.sleep(0.04)
        await tap.close()
    assert [r.name for r in caplog.records] == ["cascade.deltas"]
