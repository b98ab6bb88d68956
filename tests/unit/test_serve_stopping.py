"""What a stop says, in the proxy's own line: uvicorn's ``Shutting down`` names neither the
signal nor what the stop waits for, and a second SIGTERM, which uvicorn takes silently
(only a second Ctrl-C quits at once), left an operator guessing (proxy/server.py)."""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator

import pytest
import uvicorn

from proxy.server import _Server


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(uvicorn.Config(app=lambda scope, receive, send: None))
    srv.started = True
    srv.server_state.connections.update({object(), object()})  # type: ignore[arg-type]
    yield srv  # its stop sets no process-wide flag (proxy.stopping)


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "cascade"]


def test_the_first_signal_says_it_stops_and_what_it_waits_for(
    server: _Server, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "cascade"):
        server.handle_exit(signal.SIGTERM, None)
    assert _said(caplog) == [
        "stopping on SIGTERM: no new connections; waiting for the 2 open connection(s) to "
        "finish their requests (event streams end now; a Ctrl-C quits at once)"
    ]
    assert server.should_exit and not server.force_exit


def test_a_second_sigterm_says_it_is_still_stopping(
    server: _Server, caplog: pytest.LogCaptureFixture
) -> None:
    server.handle_exit(signal.SIGTERM, None)
    caplog.clear()
    with caplog.at_level(logging.INFO, "cascade"):
        server.handle_exit(signal.SIGTERM, None)
    assert _said(caplog) == [
        "SIGTERM again: still waiting for 2 open connection(s); a Ctrl-C (SIGINT) quits at once"
    ]
    assert not server.force_exit
