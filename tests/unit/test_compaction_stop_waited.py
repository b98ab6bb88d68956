"""A compaction a request waits for (the hard threshold, overflow, ``/compact``, the API)
runs in that request's task: the stop's bound on what still runs (uvicorn's
``timeout_graceful_shutdown``) cancels it there, not in the summarizer's own stop, which
says each background compaction it cut in one WARNING (``Closer.after_stop``). The waited
one says so too, in the same words, naming its session only; one cancelled before any stop
(no stop begun) says nothing of a stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.services import compaction
from proxy.stopping import StopClock


def _summarizer(
    monkeypatch: pytest.MonkeyPatch, stop: StopClock, calling: asyncio.Event
) -> compaction.DurableSummarizer:
    """A summarizer whose claim is always taken and whose compaction waits on the fast
    model until cancelled: no database."""

    async def claimed(*args: Any, **kwargs: Any) -> Any:
        return SimpleNamespace(backoff_until=None)

    async def released(*args: Any, **kwargs: Any) -> None:
        return None

    monkeypatch.setattr(compaction.claims, "claim_compaction", claimed)
    monkeypatch.setattr(compaction.claims, "release_compaction", released)
    leases = SimpleNamespace(ttl=5.0, claim=lambda *a: None, unclaim=lambda *a: None)
    summarizer = compaction.DurableSummarizer(
        pool=None,  # type: ignore[arg-type]
        upstream=None,  # type: ignore[arg-type]
        bus=None,  # type: ignore[arg-type]
        count=len,  # type: ignore[arg-type]
        leases=leases,  # type: ignore[arg-type]
        stop=stop,
    )

    @contextlib.asynccontextmanager
    async def no_conn() -> AsyncIterator[None]:
        yield None

    async def thinking(job: Any, owner: Any) -> None:
        calling.set()
        await asyncio.Event().wait()

    summarizer._conn = no_conn  # type: ignore[assignment, method-assign]
    summarizer._compact = thinking  # type: ignore[assignment, method-assign]
    return summarizer


async def _cut(monkeypatch: pytest.MonkeyPatch, stopping: bool) -> None:
    stop, calling = StopClock(grace=5.0), asyncio.Event()
    summarizer = _summarizer(monkeypatch, stop, calling)
    job = SimpleNamespace(tenant="sk-tenant-secret", session_id="sess-w", trigger="hard")
    task = asyncio.create_task(summarizer._run(job, wait=True))  # type: ignore[arg-type]
    await calling.wait()
    if stopping:
        stop.begin()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_waited_compaction_the_stop_cancelled_is_one_warning_naming_its_session(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=compaction.log.name):
        await _cut(monkeypatch, stopping=True)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1, said
    assert said[0].startswith("compaction of session sess-w cancelled by the stop: ")
    assert "sk-tenant-secret" not in caplog.text


async def test_one_cancelled_with_no_stop_begun_says_nothing_of_a_stop(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=compaction.log.name):
        await _cut(monkeypatch, stopping=False)
    assert "cancelled by the stop" not in caplog.text
