"""A compaction that fails backs off, its event's figures are true, and the fast model's
``Retry-After`` and ``summarize.timeoutSeconds`` bound the summary call.

Without the backoff every request over ``softFraction`` after a failure pays one more summary
call that fails the same way (a briefing no smaller than what it replaces, a fast model that
is down). The backoff lives on the session row (the claim's expiry with no owner), so every
replica honours it; a forced compaction does not.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.fakes.replies import RecordedRequest, error, rate_limited, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import (
    CLIENT_KEY,
    FAST,
    Agent,
    Model,
    Stack,
    briefing,
    stack,
    wait_until,
    words,
)
from tests.integration.api.conftest import Records

LONG = briefing(objective=words(2400, "verbose"))  # no smaller than the span it folds


def _failed(s: Stack, session: str) -> list[dict[str, Any]]:
    return s.events(session, "context.compaction.failed")


def _row(s: Stack, session: str) -> dict[str, Any]:
    (row,) = s.query(
        "SELECT compaction_owner, compaction_expires > now() AS backing_off,"
        " extract(epoch FROM compaction_expires - now()) AS left FROM sessions WHERE id = $1",
        session,
    )
    return row


def _released(s: Stack, session: str) -> dict[str, Any]:
    """The session row once the failed compaction released its claim: its failed event is
    written before the release that sets the backoff, so the row read at the event may
    still hold the claim (its owner, the claim's own expiry)."""
    return wait_until(
        lambda: (row := _row(s, session))["compaction_owner"] is None and row,
        what="the claim's release",
    )


def _expire(s: Stack, session: str) -> None:
    s.query("UPDATE sessions SET compaction_expires = now() WHERE id = $1", session)


def test_a_failed_background_compaction_is_not_retried_by_each_request_until_its_backoff_ends(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, records: Records
) -> None:
    """Its failure is one WARNING with its cause and backoff (it logged none)."""
    model = Model(brief=lambda req: LONG)
    with stack(tmp_path, db_dsn, fake_upstream, model) as s:
        agent = Agent(s.client("loop"))
        agent.fill()
        wait_until(lambda: _failed(s, "loop"), what="the first failure")
        calls = len(model.fast_times)
        assert calls == 1
        row = _released(s, "loop")
        assert row["backing_off"]
        assert 25 < row["left"] <= 30
        (first,) = _failed(s, "loop")
        assert first["retry_in_seconds"] == 30
        (said,) = [
            r for r in records.records if r.levelno >= logging.WARNING and "loop" in r.getMessage()
        ]
        assert said.getMessage().startswith(
            "compaction of loop failed after 1 attempt(s), the next in 30 s: the briefing leaves"
        )
        for i in range(3):  # over softFraction, under hardFraction
            agent.say(f"and now {i}?")
        time.sleep(0.3)  # a background compaction would have called by now
        assert len(model.fast_times) == calls, "no summary call inside the backoff"
        assert len(_failed(s, "loop")) == 1
        _expire(s, "loop")
        agent.say("once the backoff is over")
        wait_until(lambda: len(_failed(s, "loop")) == 2, what="the retry's failure")
        assert len(model.fast_times) == calls + 1
        assert _failed(s, "loop")[-1]["retry_in_seconds"] == 60, "doubled: two in a row"


def test_a_forced_compaction_runs_inside_the_backoff_and_a_success_clears_it(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(brief=lambda req: LONG)
    with stack(tmp_path, db_dsn, fake_upstream, model) as s:
        agent = Agent(s.client("forced"))
        agent.fill()
        wait_until(lambda: _failed(s, "forced"), what="the failure")
        assert _released(s, "forced")["backing_off"]
        model.brief = lambda req: briefing()
        resp = httpx.post(
            f"{s.proxy.origin}/v1/sessions/forced/compact",
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
            timeout=20,
        )
        assert resp.status_code == 200, resp.text
        assert len(s.summaries("forced")) == 1
        row = _row(s, "forced")
        assert row["compaction_owner"] is None and row["backing_off"] is None


def test_the_no_smaller_failure_reports_the_calls_it_made(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """An unusable first answer, then a usable one no smaller than the span: two calls."""
    answers = iter(["Sure! it went fine."])
    model = Model(brief=lambda req: next(answers, LONG))
    with stack(tmp_path, db_dsn, fake_upstream, model) as s:
        Agent(s.client("two")).fill()
        (failed,) = wait_until(lambda: _failed(s, "two"), timeout=20, what="the failure")
        assert "no smaller" in failed["error"]
        assert failed["attempts"] == len(model.fast_times) == 2


class _FastAnswers:
    """The fast model answers each call with the next of ``answers`` (then a briefing); the
    agent's model says ok. Each fast call's arrival is timestamped."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.times: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, req: RecordedRequest) -> Any:
        if req.json.get("model") != FAST:
            return reply("ok")
        with self._lock:
            self.times.append(time.monotonic())
            return self.answers.pop(0) if self.answers else reply(briefing())


def test_a_long_retry_after_ends_the_attempts_and_becomes_the_backoff(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    fast = _FastAnswers(rate_limited(120), rate_limited(120), rate_limited(120))
    fake_upstream.default = fast
    with Stack(tmp_path, db_dsn, fake_upstream) as s:
        Agent(s.client("limited")).fill()
        (failed,) = wait_until(lambda: _failed(s, "limited"), what="the failure")
        assert failed["attempts"] == len(fast.times) == 1, "a retry would be refused too"
        assert failed["retry_in_seconds"] == 120
        assert "Retry-After 120" in failed["error"]
        assert 110 < _released(s, "limited")["left"] <= 120


def test_a_short_retry_after_is_waited_for_before_the_next_attempt(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    fast = _FastAnswers(error(503, headers={"retry-after": "1"}))
    fake_upstream.default = fast
    with Stack(tmp_path, db_dsn, fake_upstream) as s:
        Agent(s.client("short")).fill()
        wait_until(lambda: s.summaries("short"), what="the summary")
        assert len(fast.times) == 2
        assert fast.times[1] - fast.times[0] >= 0.95, "not the 0.2 s pause: Retry-After's 1 s"


def test_the_whole_summary_call_is_bounded_by_timeout_seconds(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(fast_delay=3.0)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"timeoutSeconds": 0.5}) as s:
        t0 = time.monotonic()
        Agent(s.client("slow")).fill()
        (failed,) = wait_until(lambda: _failed(s, "slow"), what="the failure")
        assert "timeoutSeconds" in failed["error"] and failed["attempts"] == 1
        assert failed["duration_ms"] < 2500
        assert time.monotonic() - t0 < 10


def test_another_replica_honours_the_backoff(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """The backoff is on the session row: a replica that never saw the failure keeps it."""
    model = Model(brief=lambda req: LONG)
    with stack(tmp_path, db_dsn, fake_upstream, model, replicas=2) as s:
        agent = Agent(s.client("two-replicas"))
        agent.fill()
        wait_until(lambda: _failed(s, "two-replicas"), what="the failure")
        calls = len(model.fast_times)
        agent.client = s.client("two-replicas", replica=1)
        for i in range(3):
            agent.say(f"elsewhere {i}")
        time.sleep(0.3)
        assert len(model.fast_times) == calls
        assert len(_failed(s, "two-replicas")) == 1
