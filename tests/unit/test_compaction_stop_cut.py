"""A compaction the stop cuts: counted once in ``cascade_compactions_total`` as
``interrupted`` (its close, the stop's, is written outside any request and counts nothing),
waited on by its request or in the background; and its WARNING says what happened: one that
ran lost its summary, one still waiting for its claim never started."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy import requestlog
from proxy.cascade.types import COMPACTION_COMPLETED, COMPACTION_FAILED
from proxy.metrics import Metrics
from proxy.observe import Observer, RequestObs, note_swept_compaction
from proxy.services import compaction, compaction_fold, interrupted
from proxy.stopping import StopClock
from tests.unit.test_compaction_stop_waited import _summarizer

JOB = SimpleNamespace(tenant="sk-tenant-secret", session_id="sess-c", trigger="soft")


def _interrupted(metrics: Metrics, result: str = "interrupted") -> float:
    return sum(
        s.value
        for f in text_string_to_metric_families(metrics.render().decode())
        for s in f.samples
        if s.name == "cascade_compactions_total" and s.labels.get("result") == result
    )


def _observed(metrics: Metrics) -> Any:
    record = requestlog.RequestRecord("r1")
    record.obs = RequestObs(Observer(metrics), None)
    return requestlog.begin(record)


def _started(
    monkeypatch: pytest.MonkeyPatch,
    summarizer: compaction.DurableSummarizer,
    *events: str,
    end: str = COMPACTION_FAILED,
) -> None:
    """The fake compaction reports its start (``Folding._began``: ``end``, the event its
    close would write), and ``events`` (``Folding._publish``), before it waits."""
    thinking = summarizer._compact

    async def published(*args: Any) -> None:
        return None

    monkeypatch.setattr(compaction_fold, "publish", published)

    async def began(job: Any, owner: Any) -> Any:
        summarizer._began(job, end)
        for name in events:
            await summarizer._publish(None, job, name, {})
        return await thinking(job, owner)

    summarizer._compact = began  # type: ignore[method-assign]


def _no_close(summarizer: compaction.DurableSummarizer) -> None:
    async def closed(only: Any, quiet: bool = False) -> tuple[int, set[Any]]:
        return 0, set()

    summarizer._closer._pass = closed  # type: ignore[method-assign]


async def test_a_waited_compaction_the_stop_cuts_counts_interrupted_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metrics, summarizer = await _waited_cut(monkeypatch, end=COMPACTION_FAILED)
    assert _interrupted(metrics) == 1
    assert summarizer.ending == {}


async def test_a_background_compaction_the_stop_cuts_counts_interrupted_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    metrics, stop, calling = Metrics(), StopClock(grace=5.0), asyncio.Event()
    summarizer = _summarizer(monkeypatch, stop, calling)
    _started(monkeypatch, summarizer)
    _no_close(summarizer)
    token = _observed(metrics)
    try:
        assert summarizer.start_background(JOB)  # type: ignore[arg-type]
        await calling.wait()
    finally:
        requestlog.end(token)
    with caplog.at_level(logging.WARNING, logger=compaction.log.name):
        stop.begin()
        await summarizer._end_all()
    assert _interrupted(metrics) == 1
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and said[0].startswith(
        "compaction of session sess-c cancelled by the stop: a summary it had not stored is lost"
    ), said


async def _cut_waited(
    summarizer: compaction.DurableSummarizer,
    stop: StopClock,
    calling: asyncio.Event,
    metrics: Metrics,
) -> None:
    """Run ``JOB`` as a compaction a request waits on, observed by ``metrics``, and cut it
    by the stop once its fake call began (``calling``)."""
    token = _observed(metrics)
    try:
        task = asyncio.create_task(summarizer._run(JOB, wait=True))  # type: ignore[arg-type]
        await calling.wait()
        stop.begin()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        requestlog.end(token)


async def _waited_cut(
    monkeypatch: pytest.MonkeyPatch, *events: str, end: str | None = None
) -> tuple[Metrics, compaction.DurableSummarizer]:
    """A waited compaction cut by the stop, and its summarizer: reporting its start with
    ``end`` (None: no start reported) and then ``events``."""
    metrics, stop, calling = Metrics(), StopClock(grace=5.0), asyncio.Event()
    summarizer = _summarizer(monkeypatch, stop, calling)
    if end is not None:
        _started(monkeypatch, summarizer, *events, end=end)
    await _cut_waited(summarizer, stop, calling, metrics)
    return metrics, summarizer


async def test_one_cut_before_its_start_counts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _interrupted((await _waited_cut(monkeypatch))[0]) == 0


async def test_one_cut_after_its_end_event_counts_nothing_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metrics, _ = await _waited_cut(monkeypatch, COMPACTION_FAILED, end=COMPACTION_FAILED)
    assert _interrupted(metrics) == 0  # its failed event counted it (here: a no-op publish)


async def test_one_cut_after_its_summarys_insert_counts_completed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metrics, _ = await _waited_cut(monkeypatch, end=COMPACTION_COMPLETED)
    assert _interrupted(metrics) == 0 and _interrupted(metrics, "completed") == 1


async def test_one_still_waiting_for_its_claim_says_it_never_started(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stop, calling = StopClock(grace=5.0), asyncio.Event()
    summarizer = _summarizer(monkeypatch, stop, calling)
    _no_close(summarizer)
    polled = asyncio.Event()

    async def locked(*args: Any, **kwargs: Any) -> None:  # its row locked by a statement
        polled.set()

    async def free(*args: Any, **kwargs: Any) -> bool:
        return True

    monkeypatch.setattr(compaction.claims, "claim_compaction", locked)
    monkeypatch.setattr(compaction.claims, "claim_free", free)
    assert summarizer.start_background(JOB)  # type: ignore[arg-type]
    await polled.wait()
    with caplog.at_level(logging.WARNING, logger=compaction.log.name):
        stop.begin()
        await summarizer._end_all()
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1, said
    assert said[0].startswith("compaction of session sess-c cancelled by the stop before it")
    assert "never" in said[0] or "nothing was folded" in said[0]
    assert "summary it had not stored is lost" not in said[0]
    assert "sk-tenant-secret" not in caplog.text
    assert not calling.is_set()  # it never ran


async def test_a_waited_compaction_the_stop_cuts_is_closed_by_it_once_released(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Left to the session's next compaction, another replica's would close it and count it
    again: the stop closes it, as it closes a background one, counting nothing more."""
    stop, calling = StopClock(grace=5.0), asyncio.Event()
    summarizer = _summarizer(monkeypatch, stop, calling)
    _started(monkeypatch, summarizer)
    steps: list[Any] = []

    async def released(*args: Any, **kwargs: Any) -> None:
        steps.append("released")

    async def closed(only: Any, quiet: bool = False, counts: bool = True) -> tuple[int, set[Any]]:
        steps.append((only, counts))
        return 1, set()

    monkeypatch.setattr(compaction.claims, "release_compaction", released)
    summarizer._closer._pass = closed  # type: ignore[method-assign]
    metrics = Metrics()
    await _cut_waited(summarizer, stop, calling, metrics)
    assert steps == ["released", ({(JOB.tenant, JOB.session_id)}, False)]
    assert _interrupted(metrics) == 1


async def test_a_close_that_counts_nothing_writes_the_same_partner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``counts`` off: the partner is written, its result not counted (the run counted it)."""
    summarizer = _summarizer(monkeypatch, StopClock(grace=5.0), asyncio.Event())
    written: list[str] = []

    async def unpaired(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return [{"id": 7, "data": {"trigger": "hard"}}]

    async def not_stored(*args: Any) -> None:
        return None

    async def publish(conn: Any, *, name: str, **kwargs: Any) -> None:
        written.append(name)

    monkeypatch.setattr(interrupted.events, "fetch_unpaired_compactions", unpaired)
    monkeypatch.setattr(interrupted.summaries, "fetchrow_stored_by", not_stored)
    summarizer._closer.bus = SimpleNamespace(publish=publish)  # type: ignore[assignment]
    metrics = Metrics()
    token = _observed(metrics)
    try:
        assert await summarizer._closer.close_session(None, "t", "s", counts=False) == 1
        assert _interrupted(metrics) == 0
        assert await summarizer._closer.close_session(None, "t", "s") == 1
        assert _interrupted(metrics) == 1
    finally:
        requestlog.end(token)
    assert written == [COMPACTION_FAILED, COMPACTION_FAILED]


@pytest.mark.parametrize("wait", [True, False])
async def test_one_cut_inside_its_summarys_insert_is_counted_by_its_close(
    monkeypatch: pytest.MonkeyPatch, wait: bool
) -> None:
    """The insert may have stored the summary before the cut reached it (its close then
    writes completed) or not (interrupted): the run counts nothing, and its close, in its
    own task once released, counts what it writes."""
    stop, calling = StopClock(grace=5.0), asyncio.Event()
    summarizer = _summarizer(monkeypatch, stop, calling)
    _started(monkeypatch, summarizer, end=compaction_fold.INSERTING)
    passes: list[Any] = []

    async def closed(only: Any, quiet: bool = False, counts: bool = True) -> tuple[int, set[Any]]:
        passes.append((only, counts))
        if counts and len(passes) == 1:  # it found the summary stored (as close_session)
            note_swept_compaction(COMPACTION_COMPLETED, {})
        return 1, set()

    summarizer._closer._pass = closed  # type: ignore[method-assign]
    metrics, key = Metrics(), (JOB.tenant, JOB.session_id)
    token = _observed(metrics)
    try:
        if wait:
            task = asyncio.create_task(summarizer._run(JOB, wait=True))  # type: ignore[arg-type]
        else:
            assert summarizer.start_background(JOB)  # type: ignore[arg-type]
            task = summarizer._tasks[key]
        await calling.wait()
    finally:
        requestlog.end(token)
    stop.begin()
    if wait:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        await summarizer._end_all()
    assert passes[0] == ({key}, True)  # the close in its task: counted there
    assert _interrupted(metrics) == 0 and _interrupted(metrics, "completed") == 1
