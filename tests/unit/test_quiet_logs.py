"""tests/conftest.py keeps the proxy's log lines out of the run's output between tests, and in a
failing test's report: a pytest session of its own, on that conftest, with a plugin that logs
through the proxy's handler while pytest reports a test (as a server thread's access line
does just after the response the test already read)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

LATE = """
import logging


def pytest_runtest_logreport(report):
    if report.when == "call":
        logging.getLogger("cascade.access").info("LATE LINE %s", report.nodeid)
"""

TESTS = """
import logging

from proxy.logs import configure_logging


def test_passes():
    configure_logging("info", "text")
    logging.getLogger("cascade").info("IN-TEST LINE passing")


def test_fails():
    logging.getLogger("cascade").info("IN-TEST LINE failing")
    assert False
"""


def _session(tmp_path: Path, *options: str) -> str:
    shutil.copy(Path(__file__).parents[1] / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "late_line.py").write_text(LATE)
    (tmp_path / "test_inner.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "late_line"]
        + [*options, "test_inner.py"],
        cwd=tmp_path,
        # pytest and that conftest alone: the installed plugins (schemathesis's imports take
        # seconds) have no part in what is checked here.
        env={
            **os.environ,
            "PYTHONPATH": str(tmp_path),
            "PYTEST_ADDOPTS": "",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # the one failing test
    return done.stdout + done.stderr


def test_a_line_between_tests_is_dropped_and_a_failing_tests_lines_are_reported(
    tmp_path: Path,
) -> None:
    out = _session(tmp_path)
    assert "LATE LINE" not in out
    captured = out.split("Captured stderr call", 1)[1]
    assert "INFO cascade: IN-TEST LINE failing" in captured
    assert "IN-TEST LINE passing" not in out  # a passing test's lines stay in its capture


def test_without_capture_every_line_is_shown(tmp_path: Path) -> None:
    out = _session(tmp_path, "-s")
    assert "LATE LINE test_inner.py::test_passes" in out
    assert "IN-TEST LINE passing" in out
