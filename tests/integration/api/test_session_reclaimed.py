"""A session's ``reclaimed`` describes its current history: what truncation, eviction and
summarisation took out of the rows it holds now. A reset zeroes all three; a branch carries
its parent's, as they stood when it was made (its copied rows are the cut, evicted and
folded ones), and the parent's later steps leave them alone. Migration 0027 fills the
per-stage totals of sessions stored before it from their events."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import httpx

from proxy.store.migrations import MIGRATIONS_DIR
from tests.fakes.replies import RecordedRequest, Reply, reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import MAIN, Model, Stack, stack
from tests.integration.api.sessions_helpers import (
    BIG_OUTPUT,
    MAX_CHARS,
    chat,
    config_path,  # noqa: F401  (the module's config: a small maxChars)
    settled,
    tool_history,
    user,
)
from tests.integration.api.test_compact_command import http as stack_http
from tests.integration.conftest import execute, run_sync
from tests.integration.transcripts import blob

ZERO = {"eviction": 0, "truncation": 0, "summarisation": 0}
RESULT_CHARS, KEPT_CHARS = 2000, 1500  # every result is cut, and eviction still takes it
CONTEXT = {
    "eviction": {
        "enabled": True,
        "atFraction": 0.5,
        "keepRecentRounds": 2,
        "clearAtLeast": 300,
        "minResultTokens": 100,
    },
    "toolOutput": {"maxChars": KEPT_CHARS},
}
SUMMARIZE = {"softFraction": 0.97, "hardFraction": 0.99, "keepRecent": 2}  # by /compact only


def reclaimed(http: httpx.Client, sid: str) -> dict[str, int]:
    resp = http.get(f"/v1/sessions/{sid}")
    assert resp.status_code == 200, resp.text
    out: dict[str, int] = resp.json()["reclaimed"]
    return out


def test_a_reset_zeroes_every_stage_and_later_cuts_count_afresh(http: httpx.Client) -> None:
    chat(http, tool_history(), sid="r")
    cut = settled(http, "r", 4)["reclaimed"]["truncation"]
    assert (len(BIG_OUTPUT) - MAX_CHARS) // 4 <= cut

    assert http.post("/v1/sessions/r/reset").status_code == 200
    assert reclaimed(http, "r") == ZERO

    chat(http, [*tool_history(), {"role": "assistant", "content": "ok"}, user("go")], sid="r")
    assert settled(http, "r", 6)["reclaimed"] == {**ZERO, "truncation": cut}


def test_a_compaction_whose_summary_a_reset_took_reclaims_nothing(
    http: httpx.Client, db_dsn: str
) -> None:
    chat(http, [user("hello")], sid="late")
    settled(http, "late", 2)
    # the compaction wrote summary 1 and the reset deleted it before its event went in
    late = """INSERT INTO events (tenant, session_id, name, data)
        SELECT tenant, id, 'context.compaction.completed',
               '{"summary_version": 1, "tokens_before": 900, "tokens_after": 100}'::jsonb
        FROM sessions WHERE id = 'late'"""
    run_sync(execute(db_dsn, late))
    assert reclaimed(http, "late") == ZERO


class ToolLoop:
    """An agent whose model calls a tool every step: each result is cut at ingestion and,
    once the window passes eviction's threshold, older ones are evicted."""

    def __init__(self, s: Stack, sid: str) -> None:
        self.client = s.client(sid)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": "Find out why the build is red."},
        ]

    def step(self) -> None:
        out = self.client.chat.completions.create(model=MAIN, messages=self.messages)
        msg = out.choices[0].message.model_dump(exclude_none=True)
        (call,) = msg["tool_calls"]
        self.messages += [
            msg,
            {"role": "tool", "tool_call_id": call["id"], "content": blob(RESULT_CHARS, call["id"])},
        ]


def calls_a_tool() -> Model:
    ids = itertools.count()

    def main(req: RecordedRequest) -> Reply:
        n = next(ids)
        return reply(None, tool_calls=[tool_call("read_file", {"n": n}, id=f"call_{n:02d}")])

    return Model(main=main)


def test_a_branch_carries_its_parents_reclaimed_as_it_stood_when_made(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with (
        stack(
            tmp_path,
            db_dsn,
            fake_upstream,
            calls_a_tool(),
            limit=8000,
            summarize=SUMMARIZE,
            context=CONTEXT,
        ) as s,
        stack_http(s) as h,
    ):
        agent = ToolLoop(s, "parent")
        for _ in range(30):
            agent.step()
            if reclaimed(h, "parent")["eviction"] > 0:
                break
        agent.step()  # the newest result is a whole one: something for a summary to fold
        assert h.post("/v1/sessions/parent/compact").status_code == 200
        before = reclaimed(h, "parent")
        assert all(before[stage] > 0 for stage in ZERO), before

        assert h.post("/v1/sessions/parent/branch", json={"id": "child"}).status_code == 200
        assert reclaimed(h, "child") == before

        agent.step()  # the parent cuts another result; the branch holds none of it
        after = reclaimed(h, "parent")
        assert after["truncation"] > before["truncation"]
        assert reclaimed(h, "child") == before

        assert h.post("/v1/sessions/parent/reset").status_code == 200
        assert reclaimed(h, "parent") == ZERO
        assert reclaimed(h, "child") == before


UNDO_0027 = [
    "DROP TRIGGER events_reclaimed ON events",
    "DROP FUNCTION cascade_count_reclaimed()",
    "ALTER TABLE sessions DROP COLUMN reclaimed_truncation, DROP COLUMN reclaimed_summarisation",
]


def test_the_upgrade_fills_each_sessions_totals_from_its_events(
    http: httpx.Client, db_dsn: str
) -> None:
    chat(http, tool_history(), sid="old")
    cut = settled(http, "old", 4)["reclaimed"]["truncation"]
    assert cut > 0
    chat(http, [user("hello")], sid="plain")
    settled(http, "plain", 2)
    # a database from before 0027: no totals, and a compaction's event among the old ones
    folded = """INSERT INTO events (tenant, session_id, name, data)
        SELECT tenant, id, 'context.compaction.completed',
               '{"tokens_before": 900, "tokens_after": 100}'::jsonb
        FROM sessions WHERE id = 'old'"""
    run_sync(execute(db_dsn, *UNDO_0027, folded))

    (migration,) = MIGRATIONS_DIR.glob("0027_*.sql")
    run_sync(execute(db_dsn, migration.read_text(encoding="utf-8")))

    assert reclaimed(http, "old") == {"eviction": 0, "truncation": cut, "summarisation": 800}
    assert reclaimed(http, "plain") == ZERO
