"""Requests and reads the reconciliation tests share: chat posts on a named session, the
session's stored view, and :class:`QueryLog`, which records every statement a request runs
(the statement-count tests of other features use it too)."""

from __future__ import annotations

import time
from typing import Any

import asyncpg
import httpx
from asyncpg import introspection
from starlette.testclient import TestClient

__all__ = [
    "MODEL",
    "QueryLog",
    "all_messages",
    "history",
    "live_count",
    "only",
    "post",
    "session_view",
    "settled",
    "statements",
    "user",
]

MODEL = "gpt-4o"
_INTROSPECTION = {
    introspection.INTRO_LOOKUP_TYPES,
    introspection.INTRO_LOOKUP_TYPES_13,
    introspection.TYPE_BY_NAME,
}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def history(n: int) -> list[dict[str, Any]]:
    """``n`` messages alternating user/assistant, ending with a user message."""
    out = []
    for i in range(n):
        role = "user" if (n - i) % 2 else "assistant"
        out.append({"role": role, "content": f"message {i} " + "lorem ipsum " * 5})
    return out


def session_view(http: httpx.Client | TestClient, sid: str) -> dict[str, Any]:
    resp = http.get(f"/v1/sessions/{sid}")
    assert resp.status_code == 200, resp.text
    return resp.json()


def live_count(http: httpx.Client, sid: str) -> int:
    resp = http.get(f"/v1/sessions/{sid}/messages")
    assert resp.status_code == 200, resp.text
    return len(resp.json()["data"])


def settled(http: httpx.Client, sid: str, count: int) -> dict[str, Any]:
    """The session once ``count`` live messages are stored and its head says so (the reply of
    a non-streamed request is stored right after the response went out, still under the
    session lock; a regenerate leaves the count where it was, so the head alone can't tell)."""
    deadline = time.monotonic() + 5
    while (view := session_view(http, sid))["message_count"] != count or (
        live_count(http, sid) != count
    ):
        if time.monotonic() > deadline:
            raise AssertionError(f"{sid}: expected {count} live messages, have {view}")
        time.sleep(0.02)
    return view


def all_messages(http: httpx.Client, sid: str) -> list[dict[str, Any]]:
    resp = http.get(f"/v1/sessions/{sid}/messages", params={"include_superseded": "true"})
    assert resp.status_code == 200
    return resp.json()["data"]


def post(http: httpx.Client | TestClient, sid: str, messages: list[Any], **body: Any) -> Any:
    resp = http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": messages, **body},
        headers={"x-session-id": sid},
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


class QueryLog:
    """Wraps the chat service's pool: every statement run on a lent connection is logged."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.queries: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def _log(self, record: Any) -> None:
        query = record.query
        if query not in _INTROSPECTION and "set_config('jit'" not in query:
            self.queries.append(record)

    async def acquire(self) -> Any:
        conn = await self._pool.acquire()
        conn.add_query_logger(self._log)
        return conn

    async def release(self, conn: Any) -> None:
        raw = conn._con  # the pooled connection behind asyncpg's proxy outlives the release
        await self._pool.release(conn)  # so the pool's reset statements are logged too
        raw.remove_query_logger(self._log)


def statements(log: QueryLog) -> list[str]:
    return [q.query for q in log.queries]


def only(log: QueryLog, query: str) -> Any:
    found = [q for q in log.queries if q.query == query]
    assert len(found) == 1, statements(log)
    return found[0]
