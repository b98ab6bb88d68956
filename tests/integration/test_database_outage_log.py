"""PostgreSQL stopped under a running proxy: one log line when it goes, one when it is back.

asyncpg's pool logs each failed try to restore its connection floor at WARNING with a full
traceback, every second or two for as long as the server is down (``proxy.logs`` drops those;
``proxy.store.outage`` says it once). The server is a separately started one of this test's
own, stopped and started in place.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
import pytest

from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.external_pg import PASSWORD, restartable_postgres

pytestmark = pytest.mark.timeout(60)


def _ready(http: httpx.Client, within: float) -> bool:
    deadline = time.monotonic() + within
    while http.get("/readyz").status_code != 200:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_an_outage_is_one_line_down_and_one_back_without_tracebacks(
    tmp_path: Path, fake_upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    with restartable_postgres() as pg:
        settings = Settings(database_url=pg.dsn, config=config, watch_config=False)
        server = ProxyServer(settings).start()
        try:
            with httpx.Client(base_url=server.origin, timeout=10) as http:
                assert _ready(http, 5)
                caplog.clear()
                pg.stop()
                outage_ends = time.monotonic() + 5  # asyncpg retries its floor every 1-2 s
                while time.monotonic() < outage_ends:
                    assert http.get("/readyz").status_code == 503
                    time.sleep(0.2)
                pg.start()
                assert _ready(http, 15)
                listening = time.monotonic() + 5  # the listener retries once a second
                while "listening again" not in caplog.text and time.monotonic() < listening:
                    time.sleep(0.1)
        finally:
            server.stop()
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in lines if "connection floor" in r.getMessage()]
    down = [r for r in lines if "PostgreSQL is unreachable" in r.getMessage()]
    back = [r for r in lines if "PostgreSQL is reachable again" in r.getMessage()]
    assert len(down) == 1 and len(back) == 1, [r.getMessage() for r in lines]
    # the event bus's listener: that it lost its connection, one failed retry, and that it
    # listens again, not a line a second
    bus = [r.getMessage() for r in lines if "event listener" in r.getMessage()]
    assert len(bus) <= 3 and "listening again" in bus[-1], bus
    message = down[0].getMessage()
    assert "cannot connect to PostgreSQL at" in message  # the cause
    assert PASSWORD not in message and "***" in message
    assert all(r.exc_info is None for r in lines), [r.getMessage() for r in lines if r.exc_info]
