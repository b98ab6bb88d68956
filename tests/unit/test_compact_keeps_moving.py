"""Regression: a forced compaction (``POST /v1/sessions/{id}/compact``) whose session moved
to another agent before it held its claim, on every one of its tries, answered 200 with
``compacted: false`` and the last move's reason: neither a compaction nor an error, read by a
client as nothing to fold. It is now a 409 ``session_busy`` in the OpenAI error shape, saying
to try again."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config import parse_config
from proxy.errors import ProxyError, exception_body
from proxy.services import session_changes
from proxy.services.compaction_job import CompactionJob
from proxy.services.compaction_span import CompactionResult
from proxy.services.session_locks import SessionLocks

AGENTS = ("coder", "reviewer")


class _EverMoving:
    """A summarizer whose session moved to the other agent before each claim was held."""

    def __init__(self) -> None:
        self.jobs: list[CompactionJob] = []

    async def wait_inflight(self, tenant: str, session_id: str) -> None:
        return None  # none running

    async def compact_now(self, job: CompactionJob, pause: Any = None) -> CompactionResult:
        self.jobs.append(job)
        other = AGENTS[len(self.jobs) % 2]
        return CompactionResult(None, None, 0, 0, 0, f"moved to {other}", moved_to=other)


async def test_a_compaction_whose_session_keeps_moving_is_a_409(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = parse_config({"agents": {agent: {} for agent in AGENTS}})
    turns = iter(AGENTS * session_changes._REBUILDS)

    async def session_row(conn: Any, tenant: str, session_id: str) -> dict[str, Any]:
        return {"agent": next(turns), "model": "m"}

    async def free(conn: Any, **kwargs: Any) -> None:  # no request in flight
        return None

    monkeypatch.setattr(session_changes, "require_session", session_row)
    monkeypatch.setattr(session_changes.sessions, "wait_turn", free)
    summarizer = _EverMoving()
    with pytest.raises(ProxyError) as raised:
        await session_changes.compact_session(
            object(),
            summarizer,  # type: ignore[arg-type]
            cfg,
            SessionLocks(),
            tenant="t",
            session_id="s",
            headers={},
        )
    assert len(summarizer.jobs) == session_changes._REBUILDS
    status, body = exception_body(raised.value)
    assert status == 409
    assert body["error"]["code"] == "session_busy"
    assert body["error"]["type"] == "invalid_request_error"
    assert "try again" in body["error"]["message"]


class _Deferred(_EverMoving):
    """A summarizer whose summary waited out its deadline for the whole-answer budget."""

    async def compact_now(self, job: CompactionJob, pause: Any = None) -> CompactionResult:
        self.jobs.append(job)
        return CompactionResult(None, 0, 0, 9, 9, "budget spent", failed=True, busy=True)


async def test_a_compaction_deferred_by_the_answer_budget_is_a_503_to_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not the 502 ``summary_failed`` of a fast model that failed: the proxy was busy."""

    async def session_row(conn: Any, tenant: str, session_id: str) -> dict[str, Any]:
        return {"agent": "default", "model": "m"}

    async def free(conn: Any, **kwargs: Any) -> None:
        return None

    monkeypatch.setattr(session_changes, "require_session", session_row)
    monkeypatch.setattr(session_changes.sessions, "wait_turn", free)
    with pytest.raises(ProxyError) as raised:
        await session_changes.compact_session(
            object(),
            _Deferred(),  # type: ignore[arg-type]
            parse_config({}),
            SessionLocks(),
            tenant="t",
            session_id="s",
            headers={},
        )
    status, body = exception_body(raised.value)
    assert (status, body["error"]["code"]) == (503, "server_busy")
    assert "budget spent" in body["error"]["message"]
    # the caller asked for this one: told to retry it, not that it failed or that a later
    # compaction (which nothing may start) folds the span
    assert body["error"]["message"].endswith("; retry it shortly")
    assert "failed" not in body["error"]["message"]
