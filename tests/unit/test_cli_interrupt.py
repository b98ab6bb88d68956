"""Ctrl-C during ``cascade-proxy sessions`` or ``memory`` (a slow proxy, an answer not yet
in) ends the command as an interrupted one, exit status 130, without a traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

_asked = threading.Event()
_release = threading.Event()


class _Slow(BaseHTTPRequestHandler):
    """A proxy that takes the request and answers only once the test is done."""

    def do_GET(self) -> None:
        _asked.set()
        _release.wait(30)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_url() -> Iterator[str]:
    _asked.clear()
    _release.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    _release.set()
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("command", [["sessions", "ls"], ["memory", "ls"]])
def test_ctrl_c_while_waiting_for_the_proxy_is_exit_130_without_a_traceback(
    slow_url: str, command: list[str]
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "proxy", *command, "--url", slow_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert _asked.wait(30), "the command never asked the proxy"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert "Traceback" not in err.decode(), err.decode()
    assert child.returncode == 128 + signal.SIGINT
