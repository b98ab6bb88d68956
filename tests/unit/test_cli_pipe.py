"""``cascade-proxy sessions ls | head``: a reader that closes the pipe early ends the command
quietly, as any Unix tool does, not with a BrokenPipeError traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


def _session(i: int) -> dict[str, object]:
    return {
        "id": f"session-{i:05d}",
        "agent": "default",
        "model": "gpt-4o",
        "message_count": i,
        "last_prompt_tokens": 100 * i,
        "reclaimed_tokens": 0,
        "updated_at": "2026-12-03T11:00:00+00:00",
    }


class _Sessions(BaseHTTPRequestHandler):
    """A stand-in for the proxy's session API: a list long enough to fill any pipe buffer."""

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [_session(i) for i in range(5000)]})
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sessions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("flags", [[], ["--json"]])
def test_a_reader_that_stops_early_gets_no_traceback(api_url: str, flags: list[str]) -> None:
    command = [sys.executable, "-m", "proxy", "sessions", *flags, "--url", api_url, "ls"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()  # `head -1`: read one line, then close the pipe
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    status = proc.wait(timeout=30)
    assert first.strip()
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert stderr == ""
    assert status == 141


def test_a_whole_answer_read_to_the_end_still_exits_0(api_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "sessions", "--url", api_url, "ls"],
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().count("session-") == 5000
