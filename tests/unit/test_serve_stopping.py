"""What a stop says, in the proxy's own line: uvicorn's ``Shutting down`` names neither the
signal nor what the stop waits for, and a second SIGTERM, which uvicorn takes silently
(only a second Ctrl-C quits at once), left an operator guessing (proxy/server.py)."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
from collections.abc import Iterator

import pytest
import uvicorn

from proxy import requestlog
from proxy.logs import JsonFormatter
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


def test_a_signal_taken_while_a_request_runs_is_not_that_requests_line(server: _Server) -> None:
    """A signal's handler runs in whatever code the main thread was in, a request's task
    too: the stop's lines named that request (its ``request_id``, a JSON line's field, as a
    line is formatted when written), as if it had caused the stop."""
    lines: list[dict[str, object]] = []
    handler = logging.Handler()
    handler.setFormatter(JsonFormatter())
    handler.emit = lambda record: lines.append(json.loads(handler.format(record)))  # type: ignore[method-assign]
    logger = logging.getLogger("cascade")
    logger.addHandler(handler)
    token = requestlog.begin(requestlog.RequestRecord("req-1", "s1"))
    try:
        with _level(logger):
            server.handle_exit(signal.SIGTERM, None)
            server.handle_exit(signal.SIGINT, None)
            server.handle_exit(signal.SIGINT, None)
    finally:
        requestlog.end(token)
        logger.removeHandler(handler)
    assert len(lines) == 2  # the stop, and the second Ctrl-C's "interrupted again"
    for line in lines:
        assert "request_id" not in line and "session_id" not in line, line


@contextlib.contextmanager
def _level(logger: logging.Logger) -> Iterator[None]:
    before = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.setLevel(before)
