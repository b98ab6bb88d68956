"""A session freed on one replica is taken at once by its waiter on another (migration 0023).

Replica A answers a step the fake provider holds; replica B gets a request (or a reset,
branch or delete) on the same session meanwhile and waits, its polls backed off to
``POLL_MAX_SECONDS`` apart by the time A's answer is let go. Before the ``cascade_lease``
notification, B took the session only at its next poll, up to that long after A freed it;
now B's bus hears the release and ends B's pause at once. Which of the two ended B's last
pause is read from the pause itself (``Wake.wait``'s answer), not from how long B took, so
a slow machine delays the handoff without making it look like a poll. Requests that wait
for nobody send no notification at all.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest

from proxy.services.lease_wakeups import LEASE_CHANNEL, Wake
from proxy.store.leases import POLL_MAX_SECONDS
from tests.fakes.replies import Pacer, RecordedRequest, Reply, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import wait_for
from tests.integration.conftest import _admin, column

AUTH = {"authorization": "Bearer sk-test-client"}
SID = "handoff"
HANDOFFS = 8
PATIENCE = 20.0  # for what must happen, however slowly a loaded machine gets there
MARKER = "drained"  # a payload no session's hash (64 hex digits) is


def chat(c: httpx.Client, text: str) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
    return c.post("/v1/chat/completions", json=body, headers={"x-session-id": SID})


class Listener:
    """A LISTEN connection of the test's own on ``cascade_lease``, in a thread with its own
    event loop, keeping the payloads it receives."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.payloads: list[str] = []
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.add_listener(LEASE_CHANNEL, self._heard)
            self._ready.set()
            while not self._stop.is_set():
                await asyncio.sleep(0.02)
        finally:
            await conn.close()

    def _heard(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.payloads.append(payload)

    @property
    def count(self) -> int:
        """The notifications the proxy sent (the test's own marker left out)."""
        return sum(p != MARKER for p in self.payloads)

    def reaches(self, n: int) -> bool:
        """Whether ``n`` notifications have arrived, waiting for the last ones: the thread
        that receives them may lag on a loaded machine."""
        return bool(wait_for(lambda: self.count >= n, PATIENCE))

    def drain(self) -> None:
        """Once no lease is held (the last request's release, which would announce, is
        committed), send the test's own notification and wait for it: the channel delivers
        in commit order, so any notification of the proxy's has arrived by then."""
        wait_until_free(self.dsn)
        _admin(self.dsn, f"SELECT pg_notify('{LEASE_CHANNEL}', '{MARKER}')")
        assert wait_for(lambda: MARKER in self.payloads, PATIENCE), "no marker came back"

    def __enter__(self) -> Listener:
        self._thread.start()
        assert self._ready.wait(PATIENCE), "the test's listener did not connect"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def wait_until_free(dsn: str) -> None:
    """Wait until no session's lease is held: a request's release is its last statement,
    after its answer was sent."""
    held = "SELECT count(*) FROM sessions WHERE lease_owner IS NOT NULL"
    assert wait_for(lambda: column(dsn, held) == [0], PATIENCE), "a lease is still held"


@dataclass
class Pause:
    """One pause of a waiter on a held lease: how long its poll delay was, and whether the
    session's notification ended it (None while it lasts)."""

    seconds: float
    woken: bool | None = None


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[Pause]:
    """Every pause a waiter takes on either replica (both run in the test's process), in
    the order they began."""
    seen: list[Pause] = []
    real = Wake.wait

    async def wait(self: Wake, seconds: float) -> bool:
        pause = Pause(seconds)
        seen.append(pause)
        pause.woken = await real(self, seconds)
        return pause.woken

    monkeypatch.setattr(Wake, "wait", wait)
    return seen


@pytest.fixture
def held(fake_upstream: FakeUpstream) -> Iterator[dict[str, Pacer]]:
    """Replica A's answers (its requests' texts start with "A"), each held by a Pacer the
    test lets go, by the request's text; B's are answered at once."""
    pacers: dict[str, Pacer] = {}

    def answer(req: RecordedRequest) -> Reply:
        text = req.json["messages"][-1]["content"]
        if not text.startswith("A"):
            return reply("ok")
        return reply("ok", pacer=pacers.setdefault(text, Pacer(PATIENCE, first=True)))

    fake_upstream.default = answer
    yield pacers
    for pacer in pacers.values():  # a test that failed midway leaves nothing waiting
        pacer.allow(100)


def handoffs(
    replicas: list[str],
    held: dict[str, Pacer],
    pauses: list[Pause],
    db_dsn: str,
    on_b: Callable[[httpx.Client, int], None],
    n: int = HANDOFFS,
) -> list[Pause]:
    """``n`` handoffs from replica A to replica B (:func:`handoff`); B's last pause in
    each, the one that ended before B had the session."""
    a, b = replicas
    with (
        httpx.Client(base_url=a, headers=AUTH, timeout=30) as ca,
        httpx.Client(base_url=b, headers=AUTH, timeout=30) as cb,
        ThreadPoolExecutor(2) as pool,
        Listener(db_dsn) as heard,
    ):
        last = [handoff(pool, ca, cb, held, pauses, on_b, i) for i in range(n)]
        assert heard.reaches(n), heard.count  # each release with B queued said so
    return last


def handoff(
    pool: ThreadPoolExecutor,
    ca: httpx.Client,
    cb: httpx.Client,
    held: dict[str, Pacer],
    pauses: list[Pause],
    on_b: Callable[[httpx.Client, int], None],
    i: int,
) -> Pause:
    """A step on replica A, held at the provider; once A holds the session, ``on_b`` on
    replica B; once B pauses for as long as its polls back off to, A's answer let go."""
    text = f"A {i}"
    first = pool.submit(chat, ca, text)
    assert wait_for(lambda: text in held or first.done(), PATIENCE), "A never asked"
    assert not first.done(), first.result().text  # A holds the session
    mark = len(pauses)
    second = pool.submit(on_b, cb, i)
    longest = 0.75 * POLL_MAX_SECONDS  # a poll delay jitters down by up to a quarter
    backed_off = wait_for(
        lambda: second.done() or any(p.seconds >= longest for p in pauses[mark:]), PATIENCE
    )
    assert backed_off and not second.done(), "B did not wait for A's step"
    held[text].allow(100)
    assert first.result().status_code == 200
    second.result()
    return pauses[-1]


def woken(last: list[Pause]) -> bool:
    """B's last pause ended by the notification in most handoffs. With the poll alone none
    is; with the notification one ends by its poll only when that poll falls between the
    release and the notification's arrival, which a loaded machine widens: a race half the
    handoffs do not lose."""
    return sum(bool(p.woken) for p in last) > len(last) // 2


def test_a_waiter_on_another_replica_takes_the_session_as_soon_as_it_is_freed(
    replicas: list[str], held: dict[str, Pacer], pauses: list[Pause], db_dsn: str
) -> None:
    def on_b(cb: httpx.Client, i: int) -> None:
        r = chat(cb, f"B {i}")
        assert r.status_code == 200, r.text

    last = handoffs(replicas, held, pauses, db_dsn, on_b)
    assert woken(last), f"B's last pauses (seconds, woken): {last}"


def test_a_session_operation_on_another_replica_runs_as_soon_as_it_is_freed(
    replicas: list[str], held: dict[str, Pacer], pauses: list[Pause], db_dsn: str
) -> None:
    """Reset, branch and delete in turn: the session API's pause between tries is woken
    the same way (services/session_changes.py)."""

    def on_b(cb: httpx.Client, i: int) -> None:
        action = ("reset", "branch", "delete")[i % 3]
        if action == "reset":
            r = cb.post(f"/v1/sessions/{SID}/reset")
        elif action == "branch":
            r = cb.post(f"/v1/sessions/{SID}/branch", json={"id": f"{SID}-copy-{i}"})
        else:
            r = cb.delete(f"/v1/sessions/{SID}")
        assert r.status_code == 200, r.text

    last = handoffs(replicas, held, pauses, db_dsn, on_b, n=9)
    assert woken(last), f"B's operations' last pauses (seconds, woken): {last}"


def test_requests_nobody_waits_for_send_no_notification(
    replicas: list[str], fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """Requests one after another (each once the one before freed the session), on one
    replica and taking turns on two: none queues, so no release announces anything (the
    statements call migration 0023's function only for a queue that is not NULL)."""
    a, b = replicas
    with Listener(db_dsn) as heard:
        for i, origin in enumerate([a, a, b, a, b, b]):
            wait_until_free(db_dsn)
            with httpx.Client(base_url=origin, headers=AUTH, timeout=30) as c:
                assert chat(c, f"B {i}").status_code == 200
        heard.drain()
    assert len(fake_upstream.bodies()) == 6
    assert heard.count == 0, heard.payloads
