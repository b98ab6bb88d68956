"""``cascade-proxy serve`` stopped with SIGTERM (``docker stop``) during a stream: the answer
in flight is streamed to its end and stored before the process exits (README: Stopping);
during a background compaction: the stop does not wait for it, and closes it as interrupted."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Model
from tests.integration.conftest import column
from tests.reliability.conftest import Figures, write_config
from tests.reliability.test_sigkill import (
    COMPACTION_EVENTS,
    _consistent,
    _post,
    compacting_config,
    start_a_background_compaction,
)

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


def test_sigterm_during_a_background_compaction_closes_it_as_interrupted(
    proxy_process: Any, fake_upstream: FakeUpstream, db_dsn: str, tmp_path: Path, figures: Figures
) -> None:
    """SIGTERM during a background compaction: the stop does not wait for the fast model, the
    history is whole, and the stop pairs its started event with an interrupted failure."""
    model = Model(fast_delay=30.0)  # the summary never comes before the stop
    fake_upstream.default = model
    config = compacting_config(tmp_path, fake_upstream.url)
    p = proxy_process(config)
    history = start_a_background_compaction(p, model)
    names = COMPACTION_EVENTS
    rows_before = _consistent(db_dsn, "compacting")
    stopped = time.monotonic()
    p.proc.send_signal(signal.SIGTERM)
    assert p.proc.wait(timeout=20) == -signal.SIGTERM
    assert time.monotonic() - stopped < 5  # the fast model's 30 s are not waited for
    assert _consistent(db_dsn, "compacting") == rows_before
    # paired by the stop itself: a replica scaled down is not started again to sweep
    assert column(db_dsn, names) == ["context.compaction.started", "context.compaction.failed"]
    reason = "SELECT data->>'reason' FROM events WHERE name = 'context.compaction.failed'"
    assert column(db_dsn, reason) == ["interrupted"]
    p = proxy_process(config)  # whose start finds nothing more to close
    assert column(db_dsn, names) == ["context.compaction.started", "context.compaction.failed"]
    model.fast_delay = 0.0
    history.append({"role": "user", "content": "go on"})
    history.append(_post(p, "compacting", history))
    figures.add(tried=1, rows=len(rows_before))
