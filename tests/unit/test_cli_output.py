"""What ``cascade-proxy sessions`` and ``memory`` write: an output that cannot be written (a
full disk, a closed stdout) is one line on stderr, not a traceback; stored text that would
reorder or hide what the terminal shows is written as escapes."""

from __future__ import annotations

import errno
import io
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from proxy.cli import main
from proxy.cli_text import printable


class _Session(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"id": "s1", "object": "session", "model": "gpt-4o"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Session)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _Full(io.RawIOBase):
    """A stdout on a full disk (``> /dev/full``)."""

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("flags", [[], ["--json"]])
def test_a_full_disk_under_stdout_is_one_line_and_exit_1(
    api_url: str,
    flags: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CASCADE_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(_Full(), encoding="utf-8"))
    assert main(["sessions", "show", "s1", "--url", api_url, *flags]) == 1
    err = capsys.readouterr().err
    assert err == "cascade-proxy sessions show: cannot write the answer: No space left on device\n"


def test_a_closed_stdout_is_one_line_and_exit_1(
    api_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CASCADE_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr(sys, "stdout", None)  # `cascade-proxy … >&-`
    assert main(["sessions", "show", "s1", "--url", api_url]) == 1
    err = capsys.readouterr().err
    assert err == "cascade-proxy sessions show: cannot write the answer: stdout is closed\n"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\u202eb", "a\\u202eb"),  # RIGHT-TO-LEFT OVERRIDE: the rest of the line reversed
        ("\u2066x\u2069", "\\u2066x\\u2069"),  # isolates
        ("\u200e\u200f\u061c", "\\u200e\\u200f\\u061c"),  # marks
        ("a\u2028b\u2029c", "a\\u2028b\\u2029c"),  # line and paragraph separators
        ("日本語 ✓ ünï 👩\u200d💻", "日本語 ✓ ünï 👩\u200d💻"),  # text, emoji joiners kept
    ],
)
def test_bidi_controls_and_line_separators_are_written_as_escapes(text: str, shown: str) -> None:
    assert printable(text) == shown
