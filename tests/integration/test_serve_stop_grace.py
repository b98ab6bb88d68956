"""``cascade-proxy serve`` (a real process), and the app under a plain ``uvicorn``, stopped
by SIGTERM during a stream whose provider goes silent: the stream ends with a
``server_stopping`` error event and ``[DONE]`` once ``CASCADE_STOP_GRACE_SECONDS`` pass,
the turn is stored (the client's message), and the process exits by the signal, well before
an orchestrator's SIGKILL (proxy/stopping.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.conftest import column
from tests.reliability.conftest import ProxyProcess, proxy_process, write_config
from tests.reliability.control_server import wait_healthy

__all__ = ["proxy_process"]  # the fixture (tests/reliability's), for pytest to find

AUTH = {"authorization": "Bearer sk-test-client"}


class _Uvicorn(ProxyProcess):
    """The same app under uvicorn's own command line (``--factory``), which runs the same
    code as ``serve`` but takes no bound from it (README, Stopping)."""

    def start(self, timeout: float = 30.0) -> ProxyProcess:
        uvicorn = Path(sys.executable).with_name("uvicorn")
        env = {
            **os.environ,
            "CASCADE_KEEPALIVE_SECONDS": "0.3",
            "CASCADE_CONFIG": str(self.config),
            "DATABASE_URL": self.database_url,
            **self.env,
        }
        argv = [str(uvicorn), "proxy.app:create_app", "--factory", "--port", str(self.port)]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        wait_healthy(self.proc, self.origin, timeout, lambda: self.log.read_text()[-2000:])
        return self


def test_sigterm_ends_a_stream_that_outlasts_the_grace_and_keeps_the_turn(
    proxy_process: Callable[..., ProxyProcess],
    fake_upstream: FakeUpstream,
    db_dsn: str,
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    p = proxy_process(config, CASCADE_STOP_GRACE_SECONDS="1")
    _stopped_mid_stream(p, fake_upstream, db_dsn)


def test_plain_uvicorn_ends_the_stream_at_the_grace_as_serve_does(
    fake_upstream: FakeUpstream, db_dsn: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    env = {"CASCADE_STOP_GRACE_SECONDS": "1"}
    p = _Uvicorn(config, db_dsn, tmp_path / "uvicorn.log", env)
    try:
        _stopped_mid_stream(p.start(), fake_upstream, db_dsn)
    finally:
        p.stop()


def _stopped_mid_stream(p: ProxyProcess, fake_upstream: FakeUpstream, db_dsn: str) -> None:
    """SIGTERM once the stream's first data line is in; the stream then ends with the stop's
    error frame within the grace and a little, its turn stored (the client's message), and
    the process by the signal."""
    assert p.proc is not None
    pacer = Pacer()  # the provider sends its first frame, then nothing
    fake_upstream.default = reply("never " * 30, chunks=30, pacer=pacer)
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    lines: list[str] = []
    stopped: float | None = None
    with (
        httpx.Client(base_url=p.origin, timeout=30, headers={**AUTH, "x-session-id": "t2"}) as c,
        c.stream("POST", "/v1/chat/completions", json=body) as r,
    ):
        for line in r.iter_lines():
            lines.append(line)
            if line.startswith("data: ") and stopped is None:
                p.proc.send_signal(signal.SIGTERM)
                stopped = time.monotonic()
    took = time.monotonic() - (stopped or 0)
    pacer.allow(100)  # the fake's response ends too, so its stop does not wait on it
    lines = [line for line in lines if line]
    assert lines[-1] == "data: [DONE]"
    assert '"code": "server_stopping"' in lines[-2], lines[-2]
    assert p.proc.wait(timeout=20) == -signal.SIGTERM
    assert 1 <= took < 5, took
    stored = "SELECT role FROM messages WHERE session_id = 't2' ORDER BY pos"
    assert column(db_dsn, stored) == ["user"]
