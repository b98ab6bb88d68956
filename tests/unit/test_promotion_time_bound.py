"""A memory promotion ends within its bound (``promotion.BOUND_SECONDS``, under
``summaries.OWED_SECONDS``): a fast model slower than that would have the session's next
request take the owed promotion over while it still runs, asking the fast model twice for
the span. Timed out, it settles what it owed, as a failure does."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from proxy.services import promotion
from proxy.store import summaries
from tests.unit.test_promotion_log import _JOB


class _Upstream:
    async def call(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(30)  # within the provider's per-read timeout, yet past the bound
        raise AssertionError("the bound ends it first")


class _Lent:
    async def give_back(self) -> None:
        pass

    async def take(self) -> Any:
        return "conn"


def test_the_bound_is_under_the_time_a_takeover_waits() -> None:
    assert 0 < promotion.BOUND_SECONDS < summaries.OWED_SECONDS


async def test_a_promotion_slower_than_its_bound_ends_and_settles_its_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settled: list[Any] = []

    async def settle_owed(conn: Any, **key: Any) -> None:
        settled.append(key)

    monkeypatch.setattr(promotion, "BOUND_SECONDS", 0.05)
    monkeypatch.setattr(summaries, "settle_owed", settle_owed)
    span = [{"role": "user", "content": "we keep the deploy key in vault"}]
    t0 = time.monotonic()
    await promotion.promote(
        _Upstream(),
        None,
        _Lent(),
        _JOB,
        span,
        count=lambda m: 10,
        owed=(2, 6),  # type: ignore[arg-type]
    )
    assert time.monotonic() - t0 < 5
    assert settled == [{"tenant": "t", "session_id": "s-1", "span": (2, 6)}]
