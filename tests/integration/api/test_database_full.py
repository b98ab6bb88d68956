"""A database out of resources (a full disk, out of memory, too many connections: SQLSTATE
class 53) under a request is the documented 503 ``database_unavailable`` with ``Retry-After``
and one WARNING naming PostgreSQL's reason, never an unexpected 500 with a traceback: the
proxy is fine, and the request may be retried once the operator has made room.

The full disk is PostgreSQL's own ``disk_full`` error, raised by a trigger on the messages
table, so a request meets it in the statement that stores its turn, as on a full volume."""

from __future__ import annotations

import logging

import asyncpg
import httpx

from tests.integration.api.conftest import ProxyServer, Records

FULL = """
CREATE FUNCTION test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'could not extend file "base/5/16767": No space left on device'
    USING ERRCODE = 'disk_full';
END $$;
CREATE TRIGGER test_disk_full BEFORE INSERT ON messages
  FOR EACH ROW EXECUTE FUNCTION test_disk_full();
"""
ROOM = "DROP TRIGGER test_disk_full ON messages; DROP FUNCTION test_disk_full();"


def chat(proxy: ProxyServer, sid: str) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=proxy.origin, timeout=20) as http:
        return http.post(
            f"/s/{sid}/v1/chat/completions",
            json=body,
            headers={"authorization": "Bearer sk-test-client"},
        )


async def test_a_full_disk_is_a_503_and_one_warning(
    proxy: ProxyServer, admin: asyncpg.Connection, records: Records
) -> None:
    await admin.execute(FULL)
    r = chat(proxy, "full-1")
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "database_unavailable"
    assert int(r.headers["retry-after"]) > 0
    [line] = [rec for rec in records.errors() if rec.levelno >= logging.WARNING]
    assert line.levelno == logging.WARNING, line.getMessage()
    assert "DiskFullError" in line.getMessage()
    assert "No space left on device" in line.getMessage()
    assert line.exc_info is None
    # readiness stays: every replica shares the database (README Decisions)
    assert httpx.get(f"{proxy.origin}/readyz", timeout=5).status_code == 200
    await admin.execute(ROOM)
    assert chat(proxy, "full-1").status_code == 200  # served once there is room again
