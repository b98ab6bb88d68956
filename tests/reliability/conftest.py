"""The reliability suite's fixtures: the integration ones (embedded PostgreSQL, a database
per test, the fake upstream, an in-thread proxy), a proxy run as its own process, and
``figures``, where each test records what it tried and measured.

``make reliability`` sets ``CASCADE_RELIABILITY_REPORT``; at the session's end the figures
and each test's outcome, the race suite's (``RACES``) too, are rendered into that file
(``tests/reliability/report.py``), so RELIABILITY.md is what the suites saw, never written
by hand. Tests marked ``soak`` run only under ``make soak`` (``-m soak``) or with
``CASCADE_SOAK=1``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.common import free_port
from proxy.settings import Settings
from tests.integration.api import conftest as api_conftest
from tests.integration.api.conftest import (  # noqa: F401  (fixtures)
    ProxyServer,
    client,
    config_path,
    http,
    proxy,
    settings,
    write_config,
)
from tests.integration.conftest import (  # noqa: F401  (fixtures and hooks)
    db_dsn,
    fake_upstream,
    pg_dsn,
    pool,
    pytest_configure,
    pytest_unconfigure,
    spare_databases,
    template_db,
)
from tests.reliability import report
from tests.reliability.control_server import terminate, wait_healthy

_HERE = Path(__file__).resolve().parent
_FIGURES = pytest.StashKey[dict[str, dict[str, Any]]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _record(config)
    soak = os.environ.get("CASCADE_SOAK") == "1" or "soak" in (config.option.markexpr or "")
    skip = pytest.mark.skip(reason="long variant: make soak (-m soak) runs it")
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)
            if "soak" in item.keywords and not soak:
                item.add_marker(skip)


class Figures:
    """What one test tried and measured: ``tried`` (a count of attempts), named figures."""

    def __init__(self, check: str) -> None:
        self.check = check
        self.tried = 0
        self.values: dict[str, Any] = {}

    def add(self, tried: int = 0, **values: Any) -> None:
        self.tried += tried
        self.values.update(values)


@pytest.fixture(autouse=True)
def _default_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """This suite loads and breaks the proxy as a deployment would see it: its in-thread
    proxies keep the product's default pool, not the small one other tests' proxies run with
    (``TEST_POOL_MAX_SIZE``)."""
    default = Settings.model_fields["pool_max_size"].default
    monkeypatch.setattr(api_conftest, "TEST_POOL_MAX_SIZE", default)


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    doc = (request.function.__doc__ or request.node.name).strip().splitlines()[0]
    fig = Figures(doc.rstrip("."))
    yield fig
    store = request.config.stash.setdefault(_FIGURES, {})
    entry = store.setdefault(request.node.nodeid, {})
    entry.update(check=fig.check, tried=fig.tried, figures=fig.values)


# The race suite (scripts/races.sh runs all of its matrix; ``make reliability`` the slice the
# suite runs) is listed in RELIABILITY.md too; its cases record no figures, each one race.
RACES = (
    "tests/integration/api/test_session_races.py",
    "tests/integration/api/test_session_races_compaction.py",
)
_ROOT = _HERE.parents[1]


def _listed(item: pytest.Item) -> bool:
    """Whether RELIABILITY.md lists ``item``: the reliability suite's tests and the races'."""
    return _HERE in item.path.parents or str(item.path.relative_to(_ROOT)) in RACES


class _Recorder:
    """Each listed test's outcome and duration into the figures. A plugin of its own, not
    this conftest's hook: a conftest's hook sees only the items under its directory."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        rep = yield
        if _listed(item) and (rep.when == "call" or rep.outcome != "passed"):
            store = item.config.stash.setdefault(_FIGURES, {})
            entry = store.setdefault(item.nodeid, {})
            doc = (getattr(item, "function", None).__doc__ or item.name).strip().splitlines()[0]
            entry.setdefault("check", doc.rstrip("."))
            if rep.when == "call" or entry.get("outcome") in (None, "passed"):
                entry["outcome"] = "skipped" if rep.skipped else rep.outcome
                entry["seconds"] = round(getattr(rep, "duration", 0.0), 1)
                if rep.when == "call" and not rep.skipped:
                    entry.setdefault("tried", 1)  # a test with ``figures`` counts its own
        return rep


def _record(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("cascade-reliability-recorder"):
        config.pluginmanager.register(_Recorder(), "cascade-reliability-recorder")


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("CASCADE_RELIABILITY_REPORT")
    store = session.config.stash.get(_FIGURES, None)
    if target and store:
        Path(target).write_text(report.render(store))


# -- the proxy as its own process ------------------------------------------------------


class ProxyProcess:
    """``cascade-proxy serve`` in a subprocess on loopback, so it can be SIGKILLed."""

    def __init__(
        self, config: Path, database_url: str, log: Path, env: dict[str, str] | None = None
    ) -> None:
        self.config, self.database_url, self.log = config, database_url, log
        self.env = env or {}
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> ProxyProcess:
        cli = Path(sys.executable).with_name("cascade-proxy")
        env = {**os.environ, "CASCADE_KEEPALIVE_SECONDS": "0.3", **self.env}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    str(cli),
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--config",
                    str(self.config),
                    "--database-url",
                    self.database_url,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        wait_healthy(self.proc, self.origin, timeout, lambda: self.log.read_text()[-2000:])
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def kill_mid_stream(
        self, body: dict[str, Any], headers: dict[str, str], *, at: str, nth: int = 1
    ) -> float:
        """Stream ``body`` from this replica and SIGKILL it at the ``nth`` line holding ``at``
        (mid-answer); returns the ``time.monotonic()`` of the kill."""
        with (
            httpx.Client(base_url=self.origin, timeout=30, headers=headers) as c,
            c.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r,
        ):
            seen = 0
            for line in r.iter_lines():
                seen += at in line
                if seen == nth:
                    self.kill()
                    return time.monotonic()
        raise AssertionError(f"the stream ended before its line {nth} holding {at!r}")

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


@pytest.fixture
def proxy_process(tmp_path: Path, db_dsn: str) -> Iterator[Any]:  # noqa: F811
    """A factory: ``proxy_process(config_path, **env)`` starts one with ``env`` added to its
    environment; all are stopped afterwards."""
    started: list[ProxyProcess] = []

    def start(config: Path, **env: str) -> ProxyProcess:
        p = ProxyProcess(config, db_dsn, tmp_path / "proxy.log", env).start()
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()
