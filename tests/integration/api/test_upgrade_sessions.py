"""Sessions an older Cascade stored, served by this one after its migrations ran.

Each ``upgrade/<commit>.json`` holds every row an older commit on main wrote for one agent
session (and a branch of it, made by that commit), as the migration it had reached left the
tables: ``0cf4969`` (through 0007: evicted results with the placeholder in ``message``, one
spill per tool call id), ``3e418ab`` (through 0011: ``call_0`` reused every round, its
earlier spills in ``tool_raw_output_versions``), ``a8d2428`` (through 0021: the lease and
the per-turn columns, as 3e418ab otherwise) and ``75c3c45`` (through 0027: the reclaimed
columns, and memory facts stored without the key 0030 adds, two of them one fact under
0033's comparison). Each wrote handles by bare tool call id. The file also holds the history
the client sent, the handles of the last prompt that commit sent upstream, and the page its
tool-outputs API answered for each id.

The rows were recorded by running the commit's ``git archive`` against the fake upstream
(tool results cut at 1500 characters, eviction and a ``/compact``, a branch; the agents.json
below) with ``python -m tests.integration.api.upgrade_record <commit>`` (``--unique-ids`` for
0cf4969, whose one spill per id would otherwise keep only the first ``call_0``; ``--facts``
for 75c3c45). The test loads them into a database migrated to the same point, runs today's
migrations over it, and serves it: what a user upgrading in place gets. Rows, not the commit,
so the test needs no git history and no old code.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai
import pytest

from proxy.settings import Settings
from proxy.store.migrations import MIGRATIONS_DIR, run_migrations
from tests.fakes.replies import RecordedRequest, Reply, reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, replied, write_config
from tests.integration.conftest import run_sync

DATA = Path(__file__).parent / "upgrade"
SID = "upg-1"
BRANCH = "upg-branch"
KEY = "sk-test"  # the tenant is this bearer token's hash (pass-through mode), as recorded
BRIEFING = (
    "## Objective\nport the parser\n## Decisions & Facts\n- uses src/parser.py\n"
    "## Files & State\n- src/parser.py\n## Open Tasks\n- finish tests\n## Next Step\n- run pytest\n"
)
CONTEXT = {
    "toolOutput": {"maxChars": 1500},
    "eviction": {
        "atFraction": 0.3,
        "keepRecentRounds": 1,
        "clearAtLeast": 300,
        "minResultTokens": 100,
    },
    "summarize": {"softFraction": 0.85, "hardFraction": 0.95, "keepRecent": 4, "background": False},
}
TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("read_file", "grep")
]


async def _load(dsn: str, migrations: Path, tables: dict[str, list[Any]]) -> None:
    """Migrate to the recorded point, insert the recorded rows, reset the id sequences."""
    await run_migrations(dsn, migrations)
    conn = await asyncpg.connect(dsn)
    try:
        for table in ["sessions", *sorted(set(tables) - {"sessions"})]:
            await conn.execute(
                f"INSERT INTO {table} SELECT * FROM json_populate_recordset(NULL::{table}, $1)",
                json.dumps(tables[table]),
            )
        serials = await conn.fetch(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = 'public' AND column_default LIKE 'nextval(%'"
        )
        for t, c in serials:
            await conn.execute(
                f"SELECT setval(pg_get_serial_sequence('{t}', '{c}'), max({c})) FROM {t}"
                f" HAVING max({c}) IS NOT NULL"
            )
    finally:
        await conn.close()


async def _count(dsn: str, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


def _rows_once_stored(dsn: str, want: int) -> tuple[int, int]:
    """(live rows, all rows) of the session once ``want`` live rows are stored, or as they
    are after 5 s: a non-streamed reply is stored just after its response goes out."""
    live = "SELECT count(*) FROM messages WHERE session_id = $1 AND superseded_at IS NULL"
    total = "SELECT count(*) FROM messages WHERE session_id = $1"
    deadline = time.monotonic() + 5
    while True:
        got = (run_sync(_count(dsn, live, SID)), run_sync(_count(dsn, total, SID)))
        if got[0] >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


@pytest.fixture(params=["0cf4969", "3e418ab", "a8d2428", "75c3c45"])
def old(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(json.loads((DATA / f"{request.param}.json").read_text()))


@pytest.fixture
def upgraded(
    old: dict[str, Any], empty_db_dsn: str, tmp_path: Path, fake_upstream: FakeUpstream
) -> Iterator[tuple[ProxyServer, str]]:
    """Today's proxy on the old rows after today's migrations, applied as ``serve``'s start
    applies them (the one replica upgraded in place: no other client connected)."""
    older = tmp_path / "migrations"
    older.mkdir()
    for path in sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        if int(path.name[:4]) <= old["migrated_to"]:
            shutil.copy(path, older / path.name)
    run_sync(_load(empty_db_dsn, older, old["tables"]))
    run_sync(run_migrations(empty_db_dsn, serving=True))
    config = write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        models={"default": {"contextLimit": 3500, "reservedOutput": 500}},
        context=CONTEXT,
    )
    server = ProxyServer(Settings(database_url=empty_db_dsn, config=config)).start()
    yield server, empty_db_dsn
    server.stop()


def _api(server: ProxyServer, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {KEY}"}
    return httpx.request(method, server.origin + path, headers=headers, timeout=30, **kw)


def _fields(m: dict[str, Any]) -> dict[str, Any]:
    return {k: m.get(k) for k in ("role", "content", "tool_call_id")}


def _chat(server: ProxyServer, messages: list[dict[str, Any]]) -> Any:
    client = openai.OpenAI(
        base_url=server.url, api_key=KEY, default_headers={"X-Session-Id": SID}, max_retries=0
    )
    return client.chat.completions.create(model="gpt-test", messages=messages, tools=TOOLS)  # type: ignore[arg-type]


def _facts_kept_and_keyed(dsn: str, facts: list[str]) -> None:
    """Every fact the old commit stored is kept as it was, and the start keys each (two that
    are one fact today keep a key each: no stored fact is dropped or rewritten)."""
    query = "SELECT fact, fact_key FROM memory ORDER BY id"
    deadline = time.monotonic() + 5
    while True:
        rows = run_sync(_rows(dsn, query))
        if all(key is not None for _, key in rows) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert [fact for fact, _ in rows] == facts
    assert all(key is not None for _, key in rows), rows
    assert len({key for _, key in rows}) == len(facts)


async def _rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(dsn)
    try:
        return [tuple(r) for r in await conn.fetch(sql)]
    finally:
        await conn.close()


def test_an_old_session_reads_and_continues_as_it_was(
    old: dict[str, Any], upgraded: tuple[ProxyServer, str], fake_upstream: FakeUpstream
) -> None:
    server, dsn = upgraded
    history: list[dict[str, Any]] = old["history"]
    queue: list[Reply] = []

    def respond(req: RecordedRequest) -> Reply:
        if req.json.get("model") == "fast-model":
            return reply(BRIEFING)
        return queue.pop(0) if queue else reply("ok")

    fake_upstream.default = respond

    # every handle the old prompt held, and each id its API answered, reads the same page
    assert set(old["handles"]) <= set(old["reads"])
    for handle, page in old["reads"].items():
        got = _api(server, "GET", f"/v1/sessions/{SID}/tool-outputs/{handle}")
        assert got.status_code == 200, (handle, got.text)
        assert got.json()["page"] == page, handle

    _facts_kept_and_keyed(dsn, old.get("facts", []))

    # what each stored row was when the client sent it, the branch's too
    for sid in (SID, BRANCH):  # the branch was made last, of the whole history
        rows = _api(server, "GET", f"/v1/sessions/{sid}/messages", params={"form": "sent"})
        assert rows.status_code == 200
        assert [_fields(r["message"]) for r in rows.json()["data"]] == [_fields(m) for m in history]

    # the client resends its history with a new turn: the same session, extended by two rows
    stored = len(history)
    queue.append(reply("Continuing."))
    history = [*history, {"role": "user", "content": "Continue after the upgrade."}]
    answer = _chat(server, history)
    history.append({"role": "assistant", "content": answer.choices[0].message.content})
    sent = fake_upstream.bodies()[-1]["messages"]
    calls = {c["id"] for m in sent for c in m.get("tool_calls") or ()}
    assert calls == {m["tool_call_id"] for m in sent if m["role"] == "tool"}
    assert any("## Objective" in str(m.get("content")) for m in sent)  # the old summary
    assert _rows_once_stored(dsn, stored + 2) == (stored + 2, stored + 2)  # (live, all)

    # the model reads an old bare handle back through read_tool_output: the same page
    handle = old["handles"][0]
    queue.append(reply(None, tool_calls=[tool_call("read_tool_output", {"id": handle}, id="r1")]))
    queue.append(reply("Read it."))
    _chat(server, [*history, {"role": "user", "content": "Read it back."}])
    inner = [m for m in fake_upstream.bodies()[-1]["messages"] if m.get("tool_call_id") == "r1"]
    assert [m["content"] for m in inner] == [old["reads"][handle]]

    # compaction continues from the old summary; the session API works on the old rows
    with httpx.Client(base_url=server.origin, headers={"Authorization": f"Bearer {KEY}"}) as h:
        replied(h, SID)  # the fold takes in the last reply, stored just after its answer
    done = _api(server, "POST", f"/v1/sessions/{SID}/compact").json()
    summaries = old["tables"]["summaries"]
    version = max(s["version"] for s in summaries if s["session_id"] == SID)
    assert done["compacted"] and done["version"] == version + 1
    assert _api(server, "GET", f"/v1/sessions/{SID}").json()["message_count"] == stored + 4
    listed = {s["id"] for s in _api(server, "GET", "/v1/sessions").json()["data"]}
    assert listed == {SID, BRANCH}
    assert _api(server, "POST", f"/v1/sessions/{SID}/branch", json={"id": "b2"}).status_code == 200
    assert _api(server, "POST", "/v1/sessions/b2/reset").status_code == 200
    assert _api(server, "DELETE", f"/v1/sessions/{BRANCH}").status_code == 200
