"""Ctrl-C during ``cascade-proxy sessions`` or ``memory`` (a slow proxy, an answer not yet
in), or while any command's imports load, ends the command as an interrupted one, exit
status 130, without a traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from proxy.cli import main

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


class _InterruptOn:
    """An import finder that raises KeyboardInterrupt when ``name`` is imported, as Ctrl-C
    does while the command's imports load (the first part of a second)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == self.name:
            raise KeyboardInterrupt


@pytest.mark.parametrize("module", ["proxy.cli_run", "proxy.app"])
@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "--url", "http://127.0.0.1:1", "ls"],
        ["memory", "--url", "http://127.0.0.1:1", "ls"],
        ["migrate", "--database-url", "postgresql://127.0.0.1:1/x"],
        ["serve", "--database-url", "postgresql://127.0.0.1:1/x"],
    ],
)
def test_ctrl_c_while_the_imports_load_is_exit_130(
    module: str, argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for loaded in ("proxy.cli_run", module):  # imported again, so the finder is asked
        monkeypatch.delitem(sys.modules, loaded, raising=False)
    monkeypatch.setattr(sys, "meta_path", [_InterruptOn(module), *sys.meta_path])
    assert main(argv) == 128 + signal.SIGINT


_INTERRUPTED_START = """
import os, signal, sys

class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "proxy.app":  # the signal arrives as the heaviest import begins
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Interrupt())
from proxy.cli import main
raise SystemExit(main(["sessions", "--url", "http://127.0.0.1:1", "ls"]))
"""


def test_a_real_ctrl_c_while_the_imports_load_is_exit_130_without_a_traceback() -> None:
    """A SIGINT delivered during the imports, at a point the child chooses rather than after
    a guessed delay: Python's handler raises KeyboardInterrupt inside the import."""
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_START], capture_output=True, text=True, timeout=60
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 128 + signal.SIGINT


def test_the_console_scripts_module_imports_nothing_slow() -> None:
    """``proxy.cli`` is imported before its Ctrl-C guard runs, so it stays on the standard
    library, with its arguments' types and its usage errors' wording (``proxy.cli_args``,
    ``proxy.cli_usage``, the standard library's alone): what it imports itself is the only
    window where Ctrl-C is a traceback."""
    probe = (
        "import sys; before = set(sys.modules); import proxy.cli; "
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] != 'proxy' "
        "and m.split('.')[0] not in sys.stdlib_module_names or m.startswith('proxy.') "
        "and m not in ('proxy.cli', 'proxy.cli_args', 'proxy.cli_usage')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
