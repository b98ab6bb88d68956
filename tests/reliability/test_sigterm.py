"""``cascade-proxy serve`` stopped with SIGTERM (``docker stop``) during a stream: the answer
in flight is streamed to its end and stored before the process exits (README: Stopping)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.conftest import column
from tests.reliability.conftest import Figures, write_config

AUTH = {"authorization": "Bearer sk-test-client"}


def test_sigterm_during_a_stream_finishes_it_and_keeps_the_reply(
    proxy_process: Any, fake_upstream: FakeUpstream, db_dsn: str, tmp_path: Path, figures: Figures
) -> None:
    """SIGTERM during a stream: the stream ends with [DONE], its reply is stored, then exit."""
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    p = proxy_process(config)
    pacer = Pacer()  # the provider sends the rest of the answer only after the SIGTERM
    fake_upstream.default = reply("drained " * 30, chunks=30, pacer=pacer)
    pacer.allow(2)  # the role frame and two pieces, then nothing until the signal
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    lines: list[str] = []
    stopped: float | None = None
    with (
        httpx.Client(base_url=p.origin, timeout=30, headers={**AUTH, "x-session-id": "t1"}) as c,
        c.stream("POST", "/v1/chat/completions", json=body) as r,
    ):
        for line in r.iter_lines():
            lines.append(line)
            if len(lines) == 5:  # mid-answer
                p.proc.send_signal(signal.SIGTERM)
                stopped = time.monotonic()
                pacer.allow(100)
    assert not pacer.expired
    lines = [line for line in lines if line]
    assert lines[-1] == "data: [DONE]"
    assert sum("drained" in line for line in lines) == 30
    assert p.proc.wait(timeout=20) == -signal.SIGTERM
    assert stopped is not None and time.monotonic() - stopped < 15
    stored = "SELECT role FROM messages WHERE session_id = 't1' ORDER BY pos"
    assert column(db_dsn, stored) == ["user", "assistant"]
    figures.add(tried=1, chunks_after_sigterm=sum("drained" in line for line in lines[4:]))
