"""A stop (SIGTERM) while a memory promotion runs in its own task after a compaction: the
lifespan's close cancelled it at once, and the span's facts, which no later compaction reads
again (the span is folded), were lost. The stop now waits for it within its grace
(``CASCADE_STOP_GRACE_SECONDS``, ``proxy/stopping.py``), and cancels it only past that."""

from __future__ import annotations

import logging
import signal
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, stack, wait_until, words
from tests.integration.api.conftest import Records
from tests.integration.api.test_promotion_off_the_path import HeldFacts

SUMMARIZE = {"softFraction": 0.8, "hardFraction": 0.8, "keepRecent": 2}
CONTEXT = {"memoryPromotion": {"mode": "auto"}}


def _stack(
    tmp_path: Path, db_dsn: str, fake: FakeUpstream, model: HeldFacts, grace: float
) -> AbstractContextManager[Any]:
    settings = {"stop_grace_seconds": grace}
    return stack(
        tmp_path, db_dsn, fake, model, summarize=SUMMARIZE, context=CONTEXT, settings=settings
    )


def _compact_with_facts_held(s: object, model: HeldFacts, session: str) -> None:
    agent = Agent(s.client(session))  # type: ignore[attr-defined]
    agent.say(words(1000, "a"))
    agent.say(words(1000, "b"))
    agent.say(words(1250, "c"))  # crosses hardFraction: the compaction, then its promotion
    assert wait_until(lambda: model.extractions == 1), "the promotion never asked"


def test_a_stop_waits_for_a_running_promotion_and_keeps_its_facts(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = HeldFacts()
    with _stack(tmp_path, db_dsn, fake_upstream, model, grace=5.0) as s:
        _compact_with_facts_held(s, model, "stop-facts")
        assert s.query("SELECT fact FROM memory") == []
        s.proxy._server.handle_exit(signal.SIGTERM, None)  # as uvicorn takes the signal
        threading.Timer(0.3, model.held.allow, args=(10,)).start()  # the facts come late
        s.proxy.stop()
        facts = s.query("SELECT fact, source_session FROM memory")
    assert facts == [{"fact": "The parser is src/parse.py", "source_session": "stop-facts"}]
    assert not model.held.expired


def test_a_promotion_past_the_grace_is_cut_with_a_warning(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, records: Records
) -> None:
    model = HeldFacts()  # never allowed: its 3 s of patience outlast the grace
    with _stack(tmp_path, db_dsn, fake_upstream, model, grace=0.3) as s:
        _compact_with_facts_held(s, model, "cut-facts")
        s.proxy._server.handle_exit(signal.SIGTERM, None)
        s.proxy.stop()
        assert s.query("SELECT fact FROM memory") == []
    said = [r.getMessage() for r in records.records if r.levelno >= logging.WARNING]
    assert any("memory promotion(s) still running after the stop's grace" in m for m in said)
