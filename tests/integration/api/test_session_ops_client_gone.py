"""A session operation whose client gives up while it waits changes nothing (issue 24).

Reset, delete, branch and compact wait for the request in flight on their session: queued
behind it on their replica, or polling the lease it holds on another. A client that times
out during that wait has gone; run once the session is free, the operation would do what
nobody asks for any more (a compaction, its summariser call billed), and a branch the
client retried would find its target made by the abandoned one. The operation ends
instead, nothing changed, with one log line beside its access line's 499, and the retried
branch is made.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import asyncpg
import httpx
import pytest

from proxy.session_id import tenant_from_bearer
from proxy.settings import Settings
from proxy.store.leases import RELEASE_LEASE
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, Records, StartProxy, wait_for
from tests.integration.api.held_session import HEADERS, hold
from tests.integration.conftest import run_sync

GONE = "while its session operation waited for the session; nothing was changed"
ACTIONS = ["reset", "delete", "branch", "compact"]
TENANT = tenant_from_bearer(HEADERS["authorization"])
HOLD = """UPDATE sessions SET lease_owner = $3,
    lease_expires = clock_timestamp() + interval '30 seconds' WHERE tenant = $1 AND id = $2"""


def _client(origin: str, timeout: float = 10) -> httpx.Client:
    return httpx.Client(base_url=origin, headers=HEADERS, timeout=timeout)


def _operate(origin: str, action: str, sid: str, *, timeout: float = 10) -> httpx.Response:
    with _client(origin, timeout) as c:
        if action == "reset":
            return c.post(f"/v1/sessions/{sid}/reset")
        if action == "delete":
            return c.delete(f"/v1/sessions/{sid}")
        if action == "compact":
            return c.post(f"/v1/sessions/{sid}/compact")
        return c.post(f"/v1/sessions/{sid}/branch", json={"id": f"{sid}-copy"})


def _give_up(origin: str, action: str, sid: str) -> None:
    with pytest.raises(httpx.ReadTimeout):  # the client's timeout: it closes the connection
        _operate(origin, action, sid, timeout=0.4)


def _unchanged(origin: str, action: str, sid: str) -> None:
    """The session as the holder left it: its two messages, and no branch of it."""
    with _client(origin) as c:
        view = c.get(f"/v1/sessions/{sid}")
        assert view.status_code == 200, view.text  # not deleted
        assert view.json()["message_count"] == 2, view.json()  # not reset
        copy = c.get(f"/v1/sessions/{sid}-copy")
        assert copy.status_code == 404, copy.text  # not branched


def _went_away(records: Records) -> None:
    """One line says the operation's client went away, and its access line has 499."""
    lines = [r.getMessage() for r in records.records if "client went away" in r.getMessage()]
    assert len(lines) == 1 and GONE in lines[0], lines
    statuses = [a["status"] for a in records.access(2)]
    assert 499 in statuses, statuses


def _noticed(records: Records) -> None:
    """Until the proxy logged that the waiting client went away: only then may the holder
    end, or the waiter, not told yet, could take the session it is leaving."""

    def went() -> bool:
        return any("client went away" in r.getMessage() for r in records.records)

    assert wait_for(went, timeout=10), "the proxy never noticed the client went away"


def _retried(origin: str, action: str, sid: str) -> None:
    """The client's retry of the operation it gave up on does it now."""
    again = _operate(origin, action, sid)
    assert again.status_code == 200, again.text
    if action == "branch":
        with _client(origin) as c:
            assert c.get(f"/v1/sessions/{sid}-copy").json()["message_count"] == 2


@pytest.mark.parametrize("action", ACTIONS)
def test_an_operation_whose_client_gives_up_in_the_queue_changes_nothing(
    proxy: ProxyServer, fake_upstream: FakeUpstream, records: Records, action: str
) -> None:
    sid = f"queued-{action}"
    holder, out, pacer = hold(proxy.origin, sid, fake_upstream)
    _give_up(proxy.origin, action, sid)
    _noticed(records)
    # it left the queue: only the holder is in it
    assert wait_for(lambda: proxy.queued(TENANT, sid) == 1), proxy.queued(TENANT, sid)
    pacer.allow(10)
    holder.join()
    assert out[0].status_code == 200
    time.sleep(0.5)  # without the watch, the queued operation runs as the request ends
    _unchanged(proxy.origin, action, sid)
    _went_away(records)
    _retried(proxy.origin, action, sid)


@pytest.mark.parametrize("action", ACTIONS)
def test_an_operation_whose_client_gives_up_polling_another_replicas_lease_changes_nothing(
    start_proxy: StartProxy,
    config_path: Path,
    fake_upstream: FakeUpstream,
    records: Records,
    action: str,
) -> None:
    a, b = start_proxy(config_path), start_proxy(config_path)
    sid = f"polled-{action}"
    holder, out, pacer = hold(a.origin, sid, fake_upstream)
    _give_up(b.origin, action, sid)
    _noticed(records)
    pacer.allow(10)
    holder.join()
    assert out[0].status_code == 200
    time.sleep(1.0)  # a poll lands at most 0.5 s after the lease is freed
    _unchanged(b.origin, action, sid)
    _went_away(records)
    _retried(b.origin, action, sid)


def test_an_operation_whose_client_leaves_gives_up_its_place_in_the_sessions_queue_at_once(
    proxy: ProxyServer, settings: Settings
) -> None:
    """Regression: a reset queued for a lease held elsewhere, whose client left, kept its
    place at the head of the session's queue (migration 0022) until it lapsed, up to a
    second after its last try, and the operation queued behind it waited that long after
    the session was freed. It now leaves the queue as its client leaves."""
    dsn = settings.database_url
    assert dsn is not None
    sid, holder = "handed-on", uuid.uuid4()
    with _client(proxy.origin) as c:  # the session, free again once answered
        body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "first"}]}
        assert c.post("/v1/chat/completions", json=body, headers={"x-session-id": sid}).is_success

    async def lease(sql: str, *more: object) -> float:
        """Run ``sql`` on the lease; when it had committed (its connection's set-up, slow
        on a loaded machine, comes before)."""
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(sql, TENANT, sid, holder, *more)
            return time.monotonic()
        finally:
            await conn.close()

    # another replica's request holds the session (its lease, as begin_step takes it)
    run_sync(lease(HOLD))
    done: list[float] = []

    def next_in_line() -> None:
        assert _operate(proxy.origin, "reset", sid).status_code == 200
        done.append(time.monotonic())

    leaving = threading.Thread(target=_give_up, args=(proxy.origin, "reset", sid))
    leaving.start()
    time.sleep(0.15)  # the first reset polls the lease, in the session's queue
    waiting = threading.Thread(target=next_in_line)
    waiting.start()
    leaving.join()
    time.sleep(0.15)  # the second reset, its turn on this replica come, polls the lease
    freed = run_sync(lease(RELEASE_LEASE, None))  # no calibration learnt
    waiting.join(5)
    assert done, "the second reset did not end"
    assert done[0] - freed < 0.25, "the second reset waited for the first one's place to lapse"
