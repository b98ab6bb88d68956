"""Issue 21, fault 4 of the issue: a compaction cut short between its
``context.compaction.started`` and its partner gets a ``context.compaction.failed`` with
reason ``interrupted``, persisted (so it replays), at the proxy's start-up and when the
session's next compaction starts, so a console waiting for the pair never waits forever.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from proxy.services.compaction import _lock_key
from proxy.session_id import tenant_from_bearer
from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.test_compaction import (
    CLIENT_KEY,
    Agent,
    Model,
    compaction_events,
    stack,
    wait_until,
    words,
)
from tests.integration.transcripts import api, replay_events

TENANT = tenant_from_bearer(f"Bearer {CLIENT_KEY}")
STARTED, COMPLETED, FAILED = (f"context.compaction.{n}" for n in ("started", "completed", "failed"))
KILL = """
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


def started(from_pos: int, version: int | None = None) -> dict[str, Any]:
    return {
        "trigger": "soft",
        "from_pos": from_pos,
        "to_pos": from_pos + 8,
        "tokens_before": 3000 + from_pos,
        "summary_version": version,
    }


async def _seed(conn: asyncpg.Connection, events: dict[str, list[tuple[str, dict]]]) -> dict:
    ids: dict[str, list[int]] = {}
    for sid, rows in events.items():
        await conn.execute("INSERT INTO sessions (tenant, id) VALUES ($1, $2)", TENANT, sid)
        for name, data in rows:
            ids.setdefault(sid, []).append(
                await conn.fetchval(
                    "INSERT INTO events (tenant, session_id, name, data)"
                    " VALUES ($1, $2, $3, $4::text::jsonb) RETURNING id",
                    TENANT,
                    sid,
                    name,
                    json.dumps({**data, "session_id": sid, "ts": "t"}),
                )
            )
    return ids


async def rows(conn: asyncpg.Connection, sid: str) -> list[tuple[int, str, dict[str, Any]]]:
    got = await conn.fetch(
        "SELECT id, name, data::text AS data FROM events WHERE session_id = $1 ORDER BY id", sid
    )
    return [(r["id"], r["name"], json.loads(r["data"])) for r in got]


def assert_interrupted(failed: dict[str, Any], started_id: int, start: dict[str, Any]) -> None:
    assert failed["reason"] == "interrupted" and "interrupted" in failed["error"]
    assert failed["started_id"] == started_id
    for key in ("trigger", "from_pos", "to_pos", "tokens_before", "summary_version"):
        assert failed[key] == start[key], key
    assert failed["tokens_after"] == start["tokens_before"]
    assert {"attempts", "duration_ms", "session_id", "ts"} <= set(failed)


async def test_start_up_closes_what_no_process_runs_any_more(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    ok = {"trigger": "soft", "summary_version": 1}
    seeded = {
        # a finished pair, then a compaction cut short, then another cut short whose
        # successor finished (an older proxy left it so)
        "crashed": [
            (STARTED, started(1)),
            (COMPLETED, ok),
            (STARTED, started(9, 1)),
            (STARTED, started(17, 1)),
            (COMPLETED, ok),
            (STARTED, started(25, 2)),
        ],
        "paired": [(STARTED, started(1)), (FAILED, {"error": "500", "reason": "x"})],
        "running": [(STARTED, started(1))],  # another replica holds its compaction lock
    }
    conn = await asyncpg.connect(db_dsn)
    try:
        ids = await _seed(conn, seeded)
        await conn.execute("SELECT pg_advisory_lock($1)", _lock_key(TENANT, "running"))
        config = write_config(tmp_path / "agents.json", fake_upstream.url)
        settings = Settings(database_url=db_dsn, config=config, keepalive_seconds=0.3)
        proxy = ProxyServer(settings).start()
        try:
            crashed = await rows(conn, "crashed")
            assert [n for _, n, _ in crashed] == [n for n, _ in seeded["crashed"]] + [FAILED] * 2
            first, second = (d for _, n, d in crashed[6:])
            assert_interrupted(first, ids["crashed"][2], started(9, 1))
            assert_interrupted(second, ids["crashed"][5], started(25, 2))
            assert len(await rows(conn, "paired")) == 2
            assert len(await rows(conn, "running")) == 1
            with api(proxy) as http:  # persisted: a console replaying the stream sees it
                replayed = replay_events(http, "crashed")
            assert [n for n, _ in replayed] == [n for _, n, _ in crashed]
            assert json.loads(replayed[-1][1]) == second
        finally:
            proxy.stop()
        ProxyServer(settings).start().stop()  # a second start finds nothing left to close
        assert len(await rows(conn, "crashed")) == 8
        assert len(await rows(conn, "running")) == 1
    finally:
        await conn.close()


def test_the_next_compaction_closes_one_cut_short_by_a_lost_connection(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(fast_delay=1.5)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"hardFraction": 0.95}) as s:
        agent = Agent(s.client("cut"))
        for i in range(5):  # the 5th crosses softFraction: a background compaction starts
            agent.say(words(450, f"t{i}"))
        wait_until(lambda: model.fast_times, what="the compaction to call the fast model")
        # Its connection dies while the fast model thinks: it can store nothing, not even
        # its failure (a SIGKILL of the proxy leaves the same rows).
        assert s.query(KILL)[0]["count"] >= 1
        time.sleep(2.0)
        assert [e["name"] for e in compaction_events(s, "cut")] == [STARTED]
        cut_id = s.query("SELECT id FROM events WHERE session_id = 'cut' AND name = $1", STARTED)[
            0
        ]["id"]
        agent.say(words(450, "next"))  # still over softFraction: the next compaction runs
        wait_until(lambda: s.summaries("cut"), 5.0, "the next compaction's summary")
        events = wait_until(
            lambda: (e := compaction_events(s, "cut"))[-1]["name"] == COMPLETED and e,
            5.0,
            "the next compaction to end",
        )
        assert [e["name"] for e in events] == [STARTED, FAILED, STARTED, COMPLETED]
        assert_interrupted(events[1], cut_id, events[0])
        with httpx.Client(
            base_url=s.proxy.origin, timeout=10, headers={"authorization": f"Bearer {CLIENT_KEY}"}
        ) as http:
            replayed = [n for n, _ in replay_events(http, "cut") if n.startswith(STARTED[:-8])]
        assert replayed == [STARTED, FAILED, STARTED, COMPLETED]
