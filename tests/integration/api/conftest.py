"""A real Cascade proxy (uvicorn on loopback) wired to the fake upstream and a per-test DB."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai
import pytest
import uvicorn

from proxy.app import create_app
from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # running in a thread
        pass


TEST_POOL_MAX_SIZE = 4
"""The pool a :class:`ProxyServer` runs with when its settings name none (the product's
default is 64, of which a start opens and warms 10): each warmed connection is a backend
forked and a step compiled at every one of the suite's proxy starts. Four leave room for
the few statements a test's requests and the replica's background work run at once (a
request holds a connection only while its statements run, and waits for one otherwise);
a test that needs the default's room, or measures the pool, names ``pool_max_size``."""


def _test_pool(settings: Settings) -> Settings:
    if "pool_max_size" in settings.model_fields_set:
        return settings
    return settings.model_copy(update={"pool_max_size": TEST_POOL_MAX_SIZE})


ROUTES: list[Callable[[Settings], Settings]] = []
"""Rewrites of every :class:`ProxyServer`'s settings, applied in order while listed:
tests/integration/pooler puts each proxy behind PgBouncer with one, so the tests written
here run through it unchanged."""


class ProxyServer:
    """Runs ``create_app(settings, **app_kwargs)`` under uvicorn in a thread; ``.url`` ends
    in ``/v1``. ``root_path``: uvicorn's ``--root-path`` (a proxy mounted under a prefix)."""

    def __init__(self, settings: Settings, *, root_path: str = "", **app_kwargs: Any) -> None:
        settings = _test_pool(settings)
        for route in ROUTES:
            settings = route(settings)
        self.settings = settings
        self.app = create_app(settings, **app_kwargs)
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=0,
            log_config=None,
            access_log=False,
            lifespan="on",
            ws="none",
            root_path=root_path,
        )
        self._server = _Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def start(self) -> ProxyServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("proxy did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        self.stopping()
        self._thread.join(timeout=10)

    def queued(self, tenant: str, session_id: str) -> int:
        """Requests and session operations holding or waiting for the session on this
        replica (its ``SessionLocks``): what a test waits for to order the next one."""
        return int(self._server.lifespan.state["chat"].locks.waiting((tenant, session_id)))

    def state(self, name: str) -> Any:
        """What the replica's lifespan made under ``name`` (``summarizer``, ``bus`` …): for a
        test that orders its steps by what the replica does inside."""
        return self._server.lifespan.state[name]

    def compacting(self, tenant: str, session_id: str) -> bool:
        """Whether a compaction of the session runs on this replica
        (``DurableSummarizer.running``): what a test waits out to see how one ended."""
        return bool(self._server.lifespan.state["summarizer"].running(tenant, session_id))

    def watched(self, tenant: str, session_id: str) -> bool:
        """Whether this replica knows someone watches the session, here or (as of its
        keeper's last read) on another replica (``EventBus.watched``)."""
        return bool(self._server.lifespan.state["bus"].watched((tenant, session_id)))

    def pooled_pids(self) -> set[int]:
        """The backend pids of the pool's connections this replica takes for open: a killed
        backend's stays until the replica's loop has read the close, and a statement handed
        that connection fails (what a test that killed backends waits out)."""
        pool = self._server.lifespan.state["pool"]
        # each holder's connection read once: the replica's loop, another thread, may let
        # go of it (``_con = None``) between a check and a use
        cons = [h._con for h in pool._holders]
        return {c.get_server_pid() for c in cons if c is not None and not c.is_closed()}

    def stopping(self) -> None:
        """Start the stop without waiting for it (:func:`stop_all` stops several at once)."""
        self._server.should_exit = True

    @property
    def origin(self) -> str:
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    @property
    def url(self) -> str:
        return f"{self.origin}/v1"


def stop_all(servers: list[ProxyServer]) -> None:
    """Stop every server in ``servers``, all at once: a stop mostly waits (uvicorn looks at
    ``should_exit`` every 0.1 s, then gives open connections 0.1 s to close), and these waits
    overlap."""
    for server in servers:
        server.stopping()
    for server in servers:
        server.stop()


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0) -> Any:
    """``predicate()``'s first truthy value, polled every 20 ms; its last value after
    ``timeout`` (the caller's assertion says what was missing). The default bounds a hang:
    what is waited for comes as soon as the proxy gets to it, however loaded the machine."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def replied(http: httpx.Client, sid: str, timeout: float = 10.0) -> None:
    """Return once session ``sid``'s last stored message is an assistant's: a non-streamed
    reply is stored just after the response is sent, and a stream's after its last chunk
    (README, "Timing of writes"), while the turn's own messages are stored before the call,
    so a read of the session API the instant a chat returns may see the turn without its
    reply, usage or events. ``http`` holds the session's key."""
    deadline = time.monotonic() + timeout
    while True:
        view = http.get(f"/v1/sessions/{sid}")
        count = view.json().get("message_count", 0) if view.status_code == 200 else 0
        if count:
            page = http.get(f"/v1/sessions/{sid}/messages", params={"offset": count - 1})
            if page.status_code == 200 and [m["role"] for m in page.json()["data"]] == [
                "assistant"
            ]:
                return
        assert time.monotonic() < deadline, f"session {sid}'s reply was never stored: {view.text}"
        time.sleep(0.02)


def write_config(path: Path, upstream_url: str, **overrides: Any) -> Path:
    """An agents.json pointing the default provider at ``upstream_url``."""
    cfg: dict[str, Any] = {
        "providers": {
            "openai": {"baseUrl": upstream_url, "timeoutSeconds": 10, "connectTimeoutSeconds": 2}
        },
        "models": {"default": {"contextLimit": 128000}},
        "agents": {"default": {"provider": "openai", "fastModel": "fast-model"}},
    }
    for key, value in overrides.items():
        cfg[key] = value
    path.write_text(json.dumps(cfg))
    return path


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    return write_config(tmp_path / "agents.json", fake_upstream.url)


@pytest.fixture
def settings(db_dsn: str, config_path: Path) -> Settings:
    return Settings(
        database_url=db_dsn, config=config_path, keepalive_seconds=0.3, watch_config=True
    )


@pytest.fixture
def proxy(settings: Settings) -> Iterator[ProxyServer]:
    server = ProxyServer(settings).start()
    yield server
    server.stop()


class Records(logging.Handler):
    """Every log record the process emits while installed (the ``records`` fixture): what the
    in-process proxy logged, as records with their fields."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def access(self, n: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        """The first ``n`` access lines' fields (written just after the response is sent)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = [r.fields for r in self.records if r.name == "cascade.access"]  # type: ignore[attr-defined]
            if len(lines) >= n or time.monotonic() > deadline:
                assert len(lines) >= n, lines
                return lines[:n]
            time.sleep(0.01)

    def errors(self) -> list[logging.LogRecord]:
        """Lines other than access lines and the server's own start/stop lines."""
        return [
            r
            for r in self.records
            if r.name == "cascade" or r.levelno >= logging.WARNING and r.name != "cascade.tokens"
        ]


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    logging.getLogger().addHandler(handler)
    yield handler
    logging.getLogger().removeHandler(handler)


StartProxy = Callable[..., ProxyServer]


@pytest.fixture
def start_proxy(db_dsn: str) -> Iterator[StartProxy]:
    """A factory: ``start_proxy(config, **settings)`` starts a proxy on ``config`` and the
    test's database (keep-alive 0.3 s, no config watcher unless ``watch_config=True``);
    every one started is stopped after the test."""
    started: list[ProxyServer] = []

    def start(config: Path | None, **settings: Any) -> ProxyServer:
        options = {"keepalive_seconds": 0.3, "watch_config": False, **settings}
        server = ProxyServer(Settings(database_url=db_dsn, config=config, **options)).start()
        started.append(server)
        return server

    yield start
    stop_all(started)


@pytest.fixture
def replicas(db_dsn: str, config_path: Path) -> Iterator[list[str]]:
    """Two proxies on the test's database and ``config_path`` (no config watcher), two
    replicas of one deployment: their origins."""
    settings = Settings(database_url=db_dsn, config=config_path, watch_config=False)
    servers = [ProxyServer(settings).start() for _ in range(2)]
    try:
        yield [s.origin for s in servers]
    finally:
        stop_all(servers)


@pytest.fixture
def client(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url, api_key="sk-test-client", max_retries=0)


@pytest.fixture
def http(proxy: ProxyServer) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=proxy.origin, headers={"authorization": "Bearer sk-test-client"}, timeout=10
    ) as c:
        yield c


@pytest.fixture
async def admin(db_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """The test's own connection to the proxy's database, outside its pool (one a
    ``KILL`` of the proxy's connections spares)."""
    conn = await asyncpg.connect(db_dsn)
    yield conn
    await conn.close()
