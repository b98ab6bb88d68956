"""Issue 21, fault 2: a pooled connection that dies under a request answers the documented
503 ``database_unavailable`` with ``Retry-After``, never a 500, and the next request is
served without restarting the proxy (the next one sent once the proxy has seen every killed
connection close: until then another killed one may be handed to it, a 503 to retry).

The backends of the proxy's database are killed with ``pg_terminate_backend`` (what a
server restart or an administrator does to them) while a request waits on a lock the test
holds, so the kill lands inside a known statement: the step's first
(``cascade_begin_step_v6``, waiting for the session's row, which the test holds locked) or a
later one (a new session's append, waiting for a table lock).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import asyncpg
import httpx
import pytest

from proxy.store.db import connection_lost
from tests.fakes.replies import Pacer, reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, wait_for
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS

PATIENCE = 20.0  # for what must happen, however slowly a loaded machine gets there
KILLED = """
SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""
WAITING = """
SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
  AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND wait_event = $1
"""


def post(proxy: ProxyServer, sid: str, *texts: str, stream: bool = False) -> httpx.Response:
    """A chat request whose history is the user turns ``texts``, each answered "ok" (the
    fake upstream's default reply)."""
    messages: list[dict[str, str]] = []
    for text in texts or ("hi",):
        messages += [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}]
    with httpx.Client(
        base_url=proxy.origin, timeout=20, headers={"authorization": "Bearer sk-test-client"}
    ) as http:
        body = {"model": "gpt-4o", "stream": stream, "messages": messages[:-1]}
        r = http.post(f"/s/{sid}/v1/chat/completions", json=body)
        r.read()
        return r


async def stored_soon(admin: asyncpg.Connection, session_id: str, expected: int) -> int:
    """The session's live message count once it reaches ``expected``, or after ``PATIENCE``."""
    deadline = time.monotonic() + PATIENCE
    while True:
        count = int(
            await admin.fetchval(
                "SELECT count(*) FROM messages WHERE session_id = $1 AND superseded_at IS NULL",
                session_id,
            )
        )
        if count >= expected or time.monotonic() > deadline:
            return count
        await asyncio.sleep(0.02)


async def kill(admin: asyncpg.Connection) -> set[int]:
    """Terminate every other backend of the database; their pids."""
    killed = {row["pid"] for row in await admin.fetch(KILLED)}
    assert killed
    return killed


def let_go(proxy: ProxyServer, killed: set[int]) -> None:
    """Return once the proxy's pool holds none of the ``killed`` backends' connections.

    ``pg_terminate_backend`` only signals a backend: it exits when it next runs, and the
    proxy sees its connection closed when its loop reads the socket. Until both happened,
    each killed connection still looks open, and a request handed one is a 503 to retry,
    not a request served: what a test that says the next request is served waits out."""
    assert wait_for(lambda: not proxy.pooled_pids() & killed, PATIENCE), "a killed one stayed"


def assert_unavailable(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "database_unavailable"
    assert r.json()["error"]["type"] == "server_error"
    assert int(r.headers["retry-after"]) > 0


async def kill_while_waiting(
    proxy: ProxyServer,
    admin: asyncpg.Connection,
    wait_event: str,
    request: Callable[[], httpx.Response],
) -> httpx.Response:
    """Run ``request`` in a thread; once a backend waits on ``wait_event`` (a lock the test
    holds), terminate every other backend of the database; the request's response, once
    the proxy let go of every killed connection (``let_go``)."""
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(request)
        deadline = time.monotonic() + PATIENCE
        while await admin.fetchval(WAITING, wait_event) == 0:
            assert time.monotonic() < deadline, "the request never waited on the lock"
            assert not future.done(), future.result().text
            time.sleep(0.01)
        killed = await kill(admin)
        r = future.result(timeout=PATIENCE)
    let_go(proxy, killed)
    return r


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
async def test_killed_in_the_first_statement(
    proxy: ProxyServer, admin: asyncpg.Connection, stream: bool
) -> None:
    assert post(proxy, "s1", stream=stream).status_code == 200
    # its reply is stored just after it is sent, freeing the lease: wait for that first
    assert await stored_soon(admin, "s1", 2) == 2
    # The next request's cascade_begin_step_v6 waits for the session row the test locks.
    again = ("hi", "again")
    tx = admin.transaction()
    await tx.start()
    await admin.execute("SELECT 1 FROM sessions WHERE id = 's1' FOR UPDATE")
    try:
        r = await kill_while_waiting(
            proxy, admin, "transactionid", lambda: post(proxy, "s1", *again, stream=stream)
        )
    finally:
        await tx.rollback()
    assert_unavailable(r)
    assert post(proxy, "s1", *again, stream=stream).status_code == 200
    # both exchanges stored, nothing of the refused attempt doubled (a whole answer's reply is
    # stored just after it is sent, so it is waited for)
    assert await stored_soon(admin, "s1", 4) == 4


async def test_killed_in_a_later_statement(proxy: ProxyServer, admin: asyncpg.Connection) -> None:
    assert post(proxy, "warm").status_code == 200
    deadline = time.monotonic() + PATIENCE  # its reply is stored after it is sent
    while await admin.fetchval("SELECT count(*) FROM messages WHERE session_id = 'warm'") < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # A new session's first statement creates its row; the messages go in with the next
    # one, which waits for the table lock the test holds.
    async with admin.transaction():
        await admin.execute("LOCK TABLE messages IN EXCLUSIVE MODE")
        r = await kill_while_waiting(proxy, admin, "relation", lambda: post(proxy, "fresh"))
    assert_unavailable(r)
    assert post(proxy, "fresh").status_code == 200


async def test_killed_between_requests(proxy: ProxyServer, admin: asyncpg.Connection) -> None:
    """Idle pooled connections killed between requests: whatever a request meets, it is
    served or told to retry, on the chat and the session API alike."""
    assert post(proxy, "s1").status_code == 200
    with httpx.Client(
        base_url=proxy.origin, timeout=20, headers={"authorization": "Bearer sk-test-client"}
    ) as http:
        for round_no in range(5):
            killed = await kill(admin)
            turns = [f"turn {i}" for i in range(round_no + 1)]
            seen = [
                post(proxy, "s1", "hi", *turns),
                http.get("/v1/sessions/s1"),
                http.get("/v1/sessions/s1/messages"),
                post(proxy, f"new{round_no}"),
            ]
            for r in seen:
                if r.status_code != 200:
                    assert_unavailable(r)
            let_go(proxy, killed)  # a killed connection none of them met yet is still pooled
            assert post(proxy, "s1", "hi", *turns).status_code == 200


@pytest.mark.parametrize(
    ("exc", "lost"),
    [
        (asyncpg.ConnectionDoesNotExistError("closed in the middle of operation"), True),
        (asyncpg.AdminShutdownError("terminating connection due to administrator command"), True),
        (asyncpg.CannotConnectNowError("the database system is starting up"), True),
        (asyncpg.InterfaceError("cannot call Connection.fetch(): connection is closed"), True),
        (
            asyncpg.InternalClientError(
                "cannot switch to state 12; another operation (2) is in progress"
            ),
            True,
        ),
        (
            asyncpg.InternalClientError(
                'cannot switch to state 12; protocol is in the "failed" state'
            ),
            True,
        ),
        (
            asyncpg.InternalClientError(
                "cannot switch to state 12; another operation (11) is in progress"
            ),
            False,
        ),
        (ConnectionResetError("reset by peer"), True),
        (BrokenPipeError(), True),
        (asyncpg.QueryCanceledError("canceling statement due to statement timeout"), False),
        (TimeoutError(), False),
        (
            asyncpg.InterfaceError("cannot perform operation: another operation is in progress"),
            False,
        ),
        (asyncpg.UniqueViolationError("duplicate key"), False),
    ],
)
def test_which_errors_mean_the_connection_was_lost(exc: Exception, lost: bool) -> None:
    assert connection_lost(exc) is lost


async def test_killed_while_the_request_waits_for_the_provider(
    proxy: ProxyServer, admin: asyncpg.Connection, fake_upstream: FakeUpstream
) -> None:
    """Every backend dies while the provider thinks (its answer held until the kill is
    done): the request holds no connection then (issue 24), so its next statement (here
    read_tool_output's, between two internal rounds) borrows a fresh one and the request is
    served, its reply stored."""
    output = "x" * 60000  # cut at ingestion: read_tool_output is offered
    messages = [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("cat", {}, id="call_big")]},
        {"role": "tool", "tool_call_id": "call_big", "content": output},
    ]
    thinking = Pacer(PATIENCE, first=True)
    fake_upstream.script(
        reply(
            None,
            tool_calls=[tool_call("read_tool_output", {"id": "call_big"}, id="int_1")],
            pacer=thinking,
        ),
        reply("done"),
    )
    with (
        ThreadPoolExecutor(1) as pool,
        httpx.Client(
            base_url=proxy.origin, timeout=20, headers={"authorization": "Bearer sk-test-client"}
        ) as http,
    ):
        future = pool.submit(
            http.post,
            "/s/s1/v1/chat/completions",
            json={"model": "gpt-4o", "messages": messages, "tools": CLIENT_TOOLS},
        )
        fake_upstream.wait_for_requests(1, timeout=PATIENCE)
        try:
            killed = await kill(admin)
            # the answer comes once the proxy saw the kill: a request that kept a connection
            # through the provider's wait would then find it dead
            let_go(proxy, killed)
        finally:
            thinking.allow(100)
        r = future.result(timeout=PATIENCE)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "done"
    assert await stored_soon(admin, "s1", 4) == 4
