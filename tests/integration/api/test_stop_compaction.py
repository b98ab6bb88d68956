"""A stop (SIGTERM) while a background compaction runs. Cut between its summary's insert and
its memory promotion's start, the span's facts were lost: the span is folded, so no later
compaction reads it again. The stop now waits for such a compaction within its grace, as
for a promotion (``services/compaction.py``). Cut during its fast model's call (no summary
yet), the compaction is closed as interrupted, and the next process folds the span again."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from proxy.cascade.types import COMPACTION_COMPLETED
from proxy.services import compaction, compaction_fold
from proxy.store import summaries
from tests.fakes.replies import Pacer
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import (
    Agent,
    Model,
    compaction_events,
    stack,
    wait_until,
    words,
)
from tests.integration.api.test_promotion_off_the_path import HeldFacts

CONTEXT = {"memoryPromotion": {"mode": "auto"}}
STARTED, FAILED = "context.compaction.started", "context.compaction.failed"


class HeldCompleted:
    """Holds a compaction's completed event, the statement after its summary's insert and
    before its promotion's start, until the stop's close of the compactions has begun and
    ``then`` seconds more have passed (0.3: time for a close that cancels it at once to do
    so), while :attr:`active`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, then: float = 0.3) -> None:
        self.reached, self.closing = threading.Event(), threading.Event()
        self.active = True
        publish, aclose = compaction_fold.publish, compaction.DurableSummarizer.aclose

        async def held(bus: Any, conn: Any, job: Any, name: str, data: dict[str, Any]) -> None:
            if name == COMPACTION_COMPLETED and self.active:
                self.reached.set()
                while not self.closing.is_set():
                    await asyncio.sleep(0.01)
                await asyncio.sleep(then)
            await publish(bus, conn, job, name, data)

        async def closing(summarizer: compaction.DurableSummarizer) -> None:
            self.closing.set()
            await aclose(summarizer)

        monkeypatch.setattr(compaction_fold, "publish", held)
        monkeypatch.setattr(compaction.DurableSummarizer, "aclose", closing)


def test_a_stop_after_the_summary_still_promotes_its_span(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldCompleted(monkeypatch)
    model = HeldFacts()
    model.held.allow(10)  # the facts come at once
    settings = {"stop_grace_seconds": 5.0}
    with stack(tmp_path, db_dsn, fake_upstream, model, context=CONTEXT, settings=settings) as s:
        Agent(s.client("cut-facts")).fill()  # the 5th turn starts a background compaction
        assert held.reached.wait(5), "the compaction never stored its summary"
        assert len(s.summaries("cut-facts")) == 1
        assert model.extractions == 0
        s.proxy._server.handle_exit(signal.SIGTERM, None)  # as uvicorn takes the signal
        s.proxy.stop()
        facts = s.query("SELECT fact, source_session FROM memory")
        names = [e["name"] for e in compaction_events(s, "cut-facts")]
    assert facts == [{"fact": "The parser is src/parse.py", "source_session": "cut-facts"}]
    assert names == [STARTED, COMPACTION_COMPLETED]


def test_a_promotion_a_stop_cut_past_its_grace_is_taken_over_by_the_next_request(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a kill leaves too (then due ``summaries.OWED_SECONDS`` after the insert): the
    session owes the span's promotion, and its next request, in the next process, runs it."""
    held = HeldCompleted(monkeypatch, then=10.0)  # past the grace: cut there
    model = HeldFacts()
    model.held.allow(10)
    settings = {"stop_grace_seconds": 0.3}
    with stack(tmp_path, db_dsn, fake_upstream, model, context=CONTEXT, settings=settings) as s:
        agent = Agent(s.client("owed"))
        agent.fill()
        assert held.reached.wait(5), "the compaction never stored its summary"
        s.proxy._server.handle_exit(signal.SIGTERM, None)
        s.proxy.stop()
        assert s.query("SELECT fact FROM memory") == []
        owed = "SELECT promotion_from, promotion_due <= now() AS due FROM sessions WHERE id = $1"
        assert s.query(owed, "owed") == [{"promotion_from": 1, "due": True}]
    held.active = False
    with stack(tmp_path, db_dsn, fake_upstream, model, context=CONTEXT) as s:
        agent.client = s.client("owed")
        agent.say("and on")
        facts = wait_until(lambda: s.query("SELECT fact, source_session FROM memory"))
        assert s.query(owed, "owed") == [{"promotion_from": None, "due": None}]
    assert facts == [{"fact": "The parser is src/parse.py", "source_session": "owed"}]
    assert model.extractions == 1


def test_a_promotion_whose_process_died_is_taken_over_once_due(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a kill leaves it: replica 0 never gets past the insert (held there), and the
    session's next request, on replica 1, takes the promotion over once it is due."""
    monkeypatch.setattr(summaries, "OWED_SECONDS", 0.5)
    held = HeldCompleted(monkeypatch, then=10.0)
    model = HeldFacts()
    model.held.allow(10)
    settings = {"stop_grace_seconds": 0.3}
    with stack(
        tmp_path, db_dsn, fake_upstream, model, context=CONTEXT, settings=settings, replicas=2
    ) as s:
        agent = Agent(s.client("died"))
        agent.fill()
        assert held.reached.wait(5), "the compaction never stored its summary"
        agent.client = s.client("died", replica=1)
        agent.say("and on")  # not due yet: replica 0 may still promote it
        assert model.extractions == 0
        time.sleep(0.6)
        agent.say("and on again")
        facts = wait_until(lambda: s.query("SELECT fact, source_session FROM memory"))
    assert facts == [{"fact": "The parser is src/parse.py", "source_session": "died"}]
    assert model.extractions == 1


def test_a_stop_during_the_fast_models_call_leaves_the_span_to_the_next_process(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    held = Model(fast_pacer=Pacer(patience=3.0, first=True))  # the briefing never comes
    with stack(tmp_path, db_dsn, fake_upstream, held, settings={"stop_grace_seconds": 5.0}) as s:
        agent = Agent(s.client("cut-call"))
        agent.fill()
        wait_until(lambda: held.fast_times, what="the compaction to call the fast model")
        s.proxy._server.handle_exit(signal.SIGTERM, None)
        s.proxy.stop()
        # the log says the summary is lost now, naming the session, not at the next start
        cut = [
            r
            for r in caplog.records
            if r.levelno == logging.WARNING and "cancelled by the stop" in r.getMessage()
        ]
        assert len(cut) == 1 and "session cut-call " in cut[0].getMessage()
        assert [e["name"] for e in compaction_events(s, "cut-call")] == [STARTED, FAILED]
        assert compaction_events(s, "cut-call")[-1]["reason"] == "interrupted"
        assert s.summaries("cut-call") == []
    with stack(tmp_path, db_dsn, fake_upstream, Model()) as s:
        agent.client = s.client("cut-call")
        agent.say(words(450, "next"))  # still past softFraction: the span is folded again
        wait_until(lambda: s.summaries("cut-call"), what="the next process's summary")
        agent.say("and on")
        names = [e["name"] for e in compaction_events(s, "cut-call")]
        sent = s.main_bodies()[-1]["messages"]
    assert names == [STARTED, FAILED, STARTED, COMPACTION_COMPLETED]
    assert "Fix the parser" in str(sent)  # the briefing is in the next prompt
    assert not any("t0 " in str(m.get("content")) for m in sent)  # its span folded away


def test_a_promotion_owed_where_promotion_is_off_now_is_settled_unpromoted(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = HeldFacts()
    model.held.allow(10)
    with stack(tmp_path, db_dsn, fake_upstream, model) as s:  # memoryPromotion off
        agent = Agent(s.client("off-now"))
        agent.say("hello")
        s.query(
            "UPDATE sessions SET promotion_from = 1, promotion_to = 2, promotion_due = now()"
            " WHERE id = $1",
            "off-now",
        )
        agent.say("again")
        owed = "SELECT promotion_from FROM sessions WHERE id = $1"
        wait_until(lambda: s.query(owed, "off-now") == [{"promotion_from": None}])
    assert model.extractions == 0
