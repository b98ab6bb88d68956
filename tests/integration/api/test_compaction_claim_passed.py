"""A compaction whose claim passed to another one just before it starts (its lease expired)
reports nothing of its own; the caller that forced it is still answered about the session,
which exists: a ``POST /compact`` says nothing was folded and why, never that there is no
session, and the next compaction runs as usual."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from proxy.services import compaction_events, compaction_span
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, Model, stack
from tests.integration.api.test_compact_command import SUMMARIZE, history, http

STARTED = "context.compaction.started"


def test_a_forced_compaction_whose_claim_passed_at_its_start_answers_nothing_folded(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = Model()
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=SUMMARIZE) as s:
        history(Agent(s.client("passed")))
        real = compaction_events.events.insert_claimed_event

        async def passed(conn: Any, **kw: Any) -> int | None:
            return None  # the lease expired and another compaction claimed the session

        monkeypatch.setattr(compaction_events.events, "insert_claimed_event", passed)
        with http(s) as h:
            resp = h.post("/v1/sessions/passed/compact")
        assert resp.status_code == 200, resp.text
        out = resp.json()
        assert out["compacted"] is False and out["folded"] == 0 and "claim" in out["reason"]
        assert not model.fast_times and s.events("passed", STARTED) == []
        monkeypatch.setattr(compaction_events.events, "insert_claimed_event", real)
        with http(s) as h:
            again = h.post("/v1/sessions/passed/compact")
        assert again.status_code == 200 and again.json()["compacted"] is True, again.text


def test_a_forced_compaction_whose_claim_passed_before_its_read_answers_nothing_folded(
    tmp_path: Path,
    db_dsn: str,
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As at its start, the compaction says why it folded nothing in a warning (README)."""
    model = Model()
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=SUMMARIZE) as s:
        history(Agent(s.client("early")))
        real = compaction_span.sessions.fetchrow_session

        async def claimed_by_another(conn: Any, **kw: Any) -> Any:
            row = await real(conn, **kw)
            return None if row is None else {**row, "compaction_owner": uuid.uuid4()}

        monkeypatch.setattr(compaction_span.sessions, "fetchrow_session", claimed_by_another)
        with http(s) as h:
            resp = h.post("/v1/sessions/early/compact")
        monkeypatch.setattr(compaction_span.sessions, "fetchrow_session", real)
        assert resp.status_code == 200, resp.text
        out = resp.json()
        assert out["compacted"] is False and "claim" in out["reason"]
        assert not model.fast_times and s.events("early", STARTED) == []
    assert "early: its claim passed; nothing folded" in caplog.text
