"""The exit statuses of ``sessions`` and ``memory``, one per thing a script tells apart: a
usage error (argparse's 2), no proxy to ask, a thing not found, a key refused, a busy proxy
or session to ask again later, any other error answer (README "CLI")."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from proxy.cli import INTERRUPTED, main
from proxy.cli_api import EXIT_BUSY, EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_UNREACHABLE


@pytest.fixture(autouse=True)
def _no_key_or_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CASCADE_URL", "CASCADE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _error(status: int, code: str) -> tuple[int, object]:
    return status, {"error": {"message": f"{code} said", "type": "x", "code": code}}


class _Proxy(BaseHTTPRequestHandler):
    """A proxy's error answers, as the API words them (``proxy.errors``)."""

    answers: ClassVar[dict[str, tuple[int, object]]] = {
        "/v1/sessions/gone": _error(404, "not_found"),
        "/v1/sessions/gone/reset": _error(404, "not_found"),
        "/v1/memory/7": _error(404, "not_found"),
        "/v1/memory/suggestions/%2E%2E/reject": _error(404, "not_found"),
        "/v1/memory/suggestions/%2E/accept": _error(404, "not_found"),
        "/v1/sessions/locked": _error(401, "invalid_api_key"),
        "/v1/sessions/theirs": _error(403, "agent_not_allowed"),
        "/v1/sessions/busy/compact": _error(409, "session_busy"),
        "/v1/sessions/bad": _error(400, "invalid_session_id"),
        # a path no route takes (a wrong prefix, an older proxy): no session's absence
        "/v1/sessions/nourl": (404, {"error": {"message": "Not Found", "code": "unknown_url"}}),
        # another service's error JSON (a wrong port): no "error" the API would give
        "/v1/sessions/detail": (404, {"detail": "Not Found"}),
        "/v1/sessions/denied": (401, {"message": "Unauthorized"}),
        "/v1/sessions/listed": (500, ["x"]),
        "/v1/sessions/crowded": _error(503, "server_busy"),
        "/v1/sessions/squared": _error(503, "server_busy"),
        "/v1/sessions/away": _error(503, "database_unavailable"),
        "/v1/sessions/failed/compact": _error(502, "summary_failed"),
        "/v1/sessions/conflict": _error(409, "other_conflict"),
        "/v1/sessions/held/compact": _error(409, "session_busy"),
        "/v1/sessions/moved": (301, "Moved Permanently"),  # a front server sending to https
    }
    # "²" is a digit to str.isdigit, and no int: the header's latin-1 byte 0xb2
    retry_after: ClassVar[dict[str, str]] = {
        "/v1/sessions/squared": "\xb2",
        "/v1/sessions/held/compact": "2",
    }

    def _answer(self) -> None:
        status, answer = self.answers[self.path.split("?")[0]]
        body = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        if status == 503:  # as proxy.wiring answers server_busy
            self.send_header("retry-after", self.retry_after.get(self.path, "1"))
        elif self.path in self.retry_after:
            self.send_header("retry-after", self.retry_after[self.path])
        if status == 301:
            self.send_header("location", "https://proxy.example/v1/sessions/moved")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_statuses_are_distinct() -> None:
    statuses = {0, 1, 2, EXIT_UNREACHABLE, EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_BUSY, 130, 141}
    assert len(statuses) == 9


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["sessions", "show", "gone"], EXIT_NOT_FOUND),
        (["sessions", "reset", "gone"], EXIT_NOT_FOUND),
        (["memory", "rm", "7"], EXIT_NOT_FOUND),
        # a dot step, escaped, is sent as the id it is: unescaped, the client resolved
        # "reject .." to POST /v1/memory/reject, a path no route takes
        (["memory", "reject", ".."], EXIT_NOT_FOUND),
        (["memory", "accept", "."], EXIT_NOT_FOUND),
        (["sessions", "show", "locked"], EXIT_REFUSED),
        (["sessions", "show", "theirs"], EXIT_REFUSED),
        (["sessions", "compact", "busy"], EXIT_BUSY),
        (["sessions", "show", "crowded"], EXIT_BUSY),
        (["sessions", "show", "away"], EXIT_BUSY),
        (["sessions", "compact", "failed"], 1),
        (["sessions", "show", "conflict"], 1),
        (["sessions", "show", "bad"], 1),
        (["sessions", "show", "nourl"], 1),
    ],
)
def test_an_error_answer_exits_with_its_kinds_status(
    url: str, argv: list[str], status: int, json_flag: list[str]
) -> None:
    assert main([*argv, "--url", url, *json_flag]) == status


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", [["sessions", "ls"], ["memory", "ls"]])
def test_no_proxy_listening_is_not_a_usage_error(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--url", f"http://127.0.0.1:{_closed_port()}"]) == EXIT_UNREACHABLE
    assert "cannot reach the proxy" in capsys.readouterr().err


def test_a_usage_error_stays_argparses_2() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sessions", "ls", "--limit", "0"])
    assert exc.value.code == 2


@pytest.mark.parametrize(
    "argv",
    [["sessions", "show", "gone"], ["sessions", "ls", "--url", "http://127.0.0.1:1"]],
)
def test_with_stderr_closed_the_error_is_not_written_on_stdout(
    url: str, argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``2>&-`` leaves Python no sys.stderr, and print(file=None) writes to stdout: the
    error line landed in the data a pipe (``| jq``) reads."""
    monkeypatch.setattr("sys.stderr", None)
    status = main([*argv, "--url", url] if "--url" not in argv else argv)
    assert status in (EXIT_NOT_FOUND, EXIT_UNREACHABLE)
    assert capsys.readouterr().out == ""


def test_readmes_table_gives_each_status_the_code_gives() -> None:
    """README's table of exit statuses, read back: a constant changed, or a row edited,
    leaves the two saying different things to the scripts that test them."""
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### CLI")[1].split("### ")[0]
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", section, re.MULTILINE))
    meanings = {
        0: "done",
        1: "any other error answer",
        2: "usage",
        EXIT_UNREACHABLE: "no proxy answered",
        EXIT_NOT_FOUND: "not found",
        EXIT_REFUSED: "the key refused",
        EXIT_BUSY: "retry later",
        INTERRUPTED: "Ctrl-C",
        141: "closed the pipe",
    }
    assert sorted(int(s) for s in rows) == sorted(meanings)
    for status, meaning in meanings.items():
        assert meaning in rows[str(status)], (status, rows[str(status)])


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
@pytest.mark.parametrize("session", ["detail", "denied", "listed"])
def test_an_error_answer_not_in_the_apis_shape_is_no_cascade_proxy(
    url: str, session: str, json_flag: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Another service's error JSON was read as the API's: "404 Not Found", exit 1 (or 5 for
    its 401: a key refused), and with --json printed as the API's, where README says what
    is not Cascade's API is quoted on one line, exit 3."""
    assert main(["sessions", "show", session, "--url", url, *json_flag]) == EXIT_UNREACHABLE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "with JSON Cascade's API does not give" in captured.err, captured.err


def test_a_busy_proxy_names_its_retry_after(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A 503 ``server_busy`` is worth a retry, and the proxy says when: the line said only
    "503 …", with nothing to tell it from a proxy that failed."""
    assert main(["sessions", "show", "crowded", "--url", url]) == EXIT_BUSY
    err = capsys.readouterr().err
    assert err == "cascade-proxy sessions show: 503 server_busy said (retry after 1 s)\n", err


def test_every_answer_to_retry_later_names_its_retry_after(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 409 ``session_busy`` exits as a busy proxy's 503 does, and names the wait it was
    given as the 503's line does: only a 503 or a 429 had its ``Retry-After`` said."""
    assert main(["sessions", "compact", "held", "--url", url]) == EXIT_BUSY
    err = capsys.readouterr().err
    assert err == "cascade-proxy sessions compact: 409 session_busy said (retry after 2 s)\n"


def test_a_retry_after_that_is_no_number_is_left_out(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``Retry-After`` of another digit than 0-9 (a superscript two) ended the command in
    a ValueError traceback, not the error's line."""
    assert main(["sessions", "show", "squared", "--url", url]) == EXIT_BUSY
    err = capsys.readouterr().err
    assert err == "cascade-proxy sessions show: 503 server_busy said\n", err


def test_a_redirect_names_where_it_sends(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A server in front that sends http:// to https:// answers a redirect, which the command
    does not follow (it would resend the key): its line quoted the body alone, not the URL
    to give instead."""
    assert main(["sessions", "show", "moved", "--url", url]) == EXIT_UNREACHABLE
    err = capsys.readouterr().err
    assert "answered 301" in err and "redirects to https://proxy.example/v1/sessions/moved" in err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("argv", [["sessions"], ["sessions", "compact"], ["memory", "rm"]])
def test_help_names_each_exit_status_as_the_code_gives_it(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A script's author reading ``--help`` found no exit status there, the 6 of a busy
    proxy and the 3 of none alike, only in README."""
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for status, meaning in {
        1: "another error answer",
        2: "usage",
        EXIT_UNREACHABLE: "no proxy answered",
        EXIT_NOT_FOUND: "not found",
        EXIT_REFUSED: "the key refused",
        EXIT_BUSY: "busy, retry later",
        INTERRUPTED: "Ctrl-C",
    }.items():
        assert f"{status} {meaning}" in out, out
