"""``cascade-proxy serve`` (a real process) stopped by SIGTERM during a stream whose provider
goes silent: the stream ends with a ``server_stopping`` error event and ``[DONE]`` once
``CASCADE_STOP_GRACE_SECONDS`` pass, the turn is stored (the client's message), and the
process exits by the signal, well before an orchestrator's SIGKILL (proxy/stopping.py)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.conftest import column
from tests.reliability.conftest import ProxyProcess, proxy_process, write_config

__all__ = ["proxy_process"]  # the fixture (tests/reliability's), for pytest to find

AUTH = {"authorization": "Bearer sk-test-client"}


def test_sigterm_ends_a_stream_that_outlasts_the_grace_and_keeps_the_turn(
    proxy_process: Callable[..., ProxyProcess],
    fake_upstream: FakeUpstream,
    db_dsn: str,
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    p = proxy_process(config, CASCADE_STOP_GRACE_SECONDS="1")
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
