"""Issue 21, fault 4 of the issue: a compaction cut short between its
``context.compaction.started`` and its partner gets a ``context.compaction.failed`` with
reason ``interrupted``, persisted (so it replays), at the proxy's start-up and when the
session's next compaction starts, so a console waiting for the pair never waits forever.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from proxy.session_id import tenant_from_bearer
from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import (
    CLIENT_KEY,
    Agent,
    Model,
    compaction_events,
    stack,
    wait_until,
    words,
)
from tests.integration.api.conftest import ProxyServer, write_config
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
        "running": [(STARTED, started(1))],  # another replica holds its compaction claim
    }
    conn = await asyncpg.connect(db_dsn)
    try:
        ids = await _seed(conn, seeded)
        await conn.execute(  # another replica's compaction claim, renewed while it runs
            "UPDATE sessions SET compaction_owner = gen_random_uuid(),"
            " compaction_expires = now() + interval '1 hour' WHERE tenant = $1 AND id = $2",
            TENANT,
            "running",
        )
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


def test_a_compaction_outlives_its_connections_while_the_fast_model_thinks(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """No connection is held while the fast model answers (issue 24): killing every
    backend then cuts nothing, and the compaction stores its summary."""
    model = Model(fast_delay=1.5)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"hardFraction": 0.95}) as s:
        agent = Agent(s.client("kept"))
        agent.fill()  # the 5th turn crosses softFraction: a background compaction starts
        wait_until(lambda: model.fast_times, what="the compaction to call the fast model")
        assert s.query(KILL)[0]["count"] >= 1
        wait_until(lambda: s.summaries("kept"), what="the compaction's summary")
        events = wait_until(
            lambda: (e := compaction_events(s, "kept"))[-1]["name"] == COMPLETED and e,
            5.0,
            "the compaction to end",
        )
        assert [e["name"] for e in events] == [STARTED, COMPLETED]


def test_the_next_compaction_closes_one_cut_short(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """A compaction whose process died between its events (what a SIGKILL of the proxy
    leaves: a started event, no partner, its claim expired) is closed when the session's
    next compaction starts."""
    model = Model()
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"hardFraction": 0.95}) as s:
        agent = Agent(s.client("cut"))
        for i in range(4):  # under softFraction: no compaction yet
            agent.say(words(450, f"t{i}"))
        cut = started(1)
        cut_id = s.query(
            "INSERT INTO events (tenant, session_id, name, data)"
            " VALUES ($1, 'cut', $2, $3::text::jsonb) RETURNING id",
            TENANT,
            STARTED,
            json.dumps({**cut, "session_id": "cut", "ts": "t"}),
        )[0]["id"]
        agent.say(words(450, "next"))  # crosses softFraction: the next compaction runs
        wait_until(lambda: s.summaries("cut"), what="the next compaction's summary")
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
