"""A usage error (a wrong flag, a bad value) under ``CASCADE_LOG_FORMAT=json`` is one JSON
log line, as every other line the process writes: argparse's own several lines of usage
would reach a log pipeline that parses each line as JSON, and be refused or mangled."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from proxy.cli import main
from proxy.cli_api import say


def _serve(*args: str, fmt: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CASCADE_LOG_FORMAT"}
    if fmt is not None:
        env["CASCADE_LOG_FORMAT"] = fmt
    return subprocess.run(
        [sys.executable, "-m", "proxy", "serve", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_usage_error_in_json_mode_is_one_json_line() -> None:
    done = _serve("--port", "0", fmt="json")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    record = json.loads(line)
    assert record["level"] == "ERROR"
    assert record["message"] == (
        "cascade-proxy serve: argument --port: 0 is not a TCP port (1-65535)"
    )


def test_an_unknown_flag_in_json_mode_is_one_json_line() -> None:
    done = _serve("--verbose", fmt="JSON")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "unrecognized arguments: --verbose" in json.loads(line)["message"]


def test_a_usage_error_in_text_keeps_argparses_usage() -> None:
    done = _serve("--port", "0", fmt=None)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: cascade-proxy serve")
    assert "argument --port: 0 is not a TCP port" in done.stderr


def _client(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CASCADE_", "OPENAI_"))}
    env["CASCADE_LOG_FORMAT"] = "json"
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args], env=env, capture_output=True, text=True, timeout=30
    )


def test_every_cli_error_line_in_json_mode_is_one_json_line() -> None:
    """README's Logs: every line the process writes is one JSON object with
    ``CASCADE_LOG_FORMAT=json``; the clients' own lines (no proxy, a URL refused, a key no
    header carries) were plain text, which a pipeline parsing each line as JSON refused."""
    unreached = _client("sessions", "ls", "--url", "http://127.0.0.1:1")
    blanks = _client("memory", "ls", "--url", "http://127.0.0.1:1 ")
    spaced = _client("sessions", "ls", "--url", "http://127.0.0.1:1", "--api-key", "a b")
    for done, status, said in (
        (unreached, 3, "cascade-proxy sessions ls: cannot reach the proxy at http://127.0.0.1:1"),
        (blanks, 2, "cascade-proxy memory ls: the URL (--url) has blanks around it"),
        (spaced, 2, "cascade-proxy sessions ls: the API key (--api-key) has a space"),
    ):
        assert done.returncode == status, done.stderr
        (line,) = done.stderr.splitlines()
        record = json.loads(line)
        assert record["level"] == "ERROR" and record["message"].startswith(said), record


def test_a_note_beside_an_answer_in_json_mode_is_an_info_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``(more follow: …)`` goes on stderr beside the answer: a JSON line too, at INFO, not
    an error."""
    monkeypatch.setenv("CASCADE_LOG_FORMAT", "json")
    try:
        say("(more follow: --cursor WyJ4Il0)", note=True)
        say("cascade-proxy sessions ls: 500 boom")
    finally:
        root = logging.getLogger()
        root.handlers[:] = [h for h in root.handlers if not getattr(h, "cascade", False)]
    note, error = (json.loads(line) for line in capsys.readouterr().err.splitlines())
    assert (note["level"], note["message"]) == ("INFO", "(more follow: --cursor WyJ4Il0)")
    assert (error["level"], error["message"]) == ("ERROR", "cascade-proxy sessions ls: 500 boom")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_cli_error_line_masks_a_key_in_text_as_in_json(
    fmt: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key given as ``--url`` (a paste into the wrong option) is quoted by "not a URL":
    the JSON line masked it (the log formatter's ``masked``), the text line wrote it."""
    key = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
    for name in ("CASCADE_URL", "CASCADE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CASCADE_LOG_FORMAT", fmt)
    try:
        assert main(["sessions", "ls", "--url", key]) == 2
    finally:
        root = logging.getLogger()
        root.handlers[:] = [h for h in root.handlers if not getattr(h, "cascade", False)]
    err = capsys.readouterr().err
    assert "not a URL" in err and key[8:] not in err, err
