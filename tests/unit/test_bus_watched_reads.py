"""The keeper's read of the sessions other replicas watch says once that it fails, not every
round of an outage, and says it again after the reads have recovered and fail anew."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from proxy.bus import EventBus


class Pool:
    """A pool whose ``fetch`` fails while ``down`` and otherwise returns one watched row."""

    def __init__(self) -> None:
        self.down = True

    async def fetch(self, *args: Any, **kwargs: Any) -> list[Any]:
        if self.down:
            raise ConnectionRefusedError("connection refused")
        return [{"tenant": "t", "session_id": "s"}]


def test_an_outage_is_said_once_and_again_after_a_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = Pool()
    bus = EventBus(pool, "postgresql://127.0.0.1/x")  # type: ignore[arg-type]

    async def rounds() -> None:
        for _ in range(5):
            await bus.refresh_watched()
        pool.down = False
        await bus.refresh_watched()
        assert bus.watched(("t", "s"))
        pool.down = True
        for _ in range(3):
            await bus.refresh_watched()

    with caplog.at_level(logging.WARNING, logger="cascade.bus"):
        asyncio.run(rounds())
    said = [r for r in caplog.records if "other replicas watch" in r.getMessage()]
    assert len(said) == 2
    assert bus.watched(("t", "s"))  # the last set read stays through the outage
