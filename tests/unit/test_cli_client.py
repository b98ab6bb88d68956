"""``cascade-proxy sessions`` and ``memory`` with a proxy URL they cannot use: one line on
stderr and exit status 2 (README, CLI), never a traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from proxy.cli import main
from proxy.cli_api import EXIT_BUSY


@pytest.fixture(autouse=True)
def _no_key_or_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gives its URL and key itself: one from the shell running the tests would
    change what the command does (a key beside a URL's password is refused)."""
    for name in ("CASCADE_URL", "CASCADE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", [["sessions", "ls"], ["memory", "ls"]])
@pytest.mark.parametrize(
    "url", ["http://[::1", "http://127.0.0.1:99999", "http://127.0.0.1:0", "127.0.0.1:8080"]
)
def test_a_malformed_url_is_one_line_and_exit_2(
    command: list[str], url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--url", url]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert url in err and "Traceback" not in err


@pytest.mark.parametrize(
    "url", ["127.0.0.1:8080", "localhost:8080/v1", "ftp://127.0.0.1:8080", "http://127.0.0.1:99999"]
)
def test_a_url_without_an_http_scheme_says_how_to_write_one(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # the host:port a user types from the banner's address was "cannot reach the proxy"
    # with httpx's words alone, as if nothing listened there
    assert main(["sessions", "ls", "--url", url]) == 2
    err = capsys.readouterr().err
    assert "not a URL" in err and "http://host:port" in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_malformed_cascade_url_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CASCADE_URL", "http://[::1")
    assert main(["sessions", "show", "s1"]) == 2
    err = capsys.readouterr().err
    assert "CASCADE_URL" in err and len(err.strip().splitlines()) == 1, err


def test_no_proxy_listening_is_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "ls", "--url", f"http://127.0.0.1:{_closed_port()}"]) == 3
    assert "cannot reach the proxy" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["sessions", "ls"], ["memory", "ls"]])
def test_a_password_in_the_url_is_not_printed(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A proxy behind a reverse proxy's basic auth is reached as http://user:password@host;
    the error names the host, not the password (stderr ends up in CI logs)."""
    port = _closed_port()
    assert main([*command, "--url", f"http://ops:TOPSECRET@127.0.0.1:{port}"]) == 3
    err = capsys.readouterr().err
    assert f"http://127.0.0.1:{port}" in err and "TOPSECRET" not in err, err


@pytest.mark.parametrize("command", [["sessions", "ls"], ["memory", "ls"]])
@pytest.mark.parametrize("cut", ["/", "#", "?"])
def test_a_password_with_a_slash_or_a_hash_in_the_url_is_not_printed(
    command: list[str], cut: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unencoded "/", "#" or "?" in the password ends the authority before the "@" for a
    URL parser, so the URL, which httpx refuses, was printed with its password; the error
    names it as a log line does (``logs.without_credentials``). httpx's reason quotes the
    password's first part as the port, so it is left out."""
    port = _closed_port()
    assert main([*command, "--url", f"http://ops:TOPSECRET{cut}MORE@127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "not a URL" in err, err
    assert "SECRET" not in err and "MORE" not in err, err


class _NotCascade(BaseHTTPRequestHandler):
    """Another JSON service at --url (the upstream itself, a gateway in front): answers of
    shapes the session API never gives."""

    answers: ClassVar[dict[str, tuple[int, object]]] = {
        "/v1/sessions": (200, []),
        "/v1/sessions/x": (404, {"error": "no route"}),
        "/v1/sessions/x/branch": (200, {"ok": True}),
        "/v1/sessions/uni": (200, {"id": "uni", "model": "模型 → …"}),
        "/v1/sessions/gz": (200, {"id": "gz"}),
        "/v1/memory": (200, {"data": []}),
        "/v1/sessions/locked": (401, {"error": {"message": "invalid proxy key"}}),
        # another service's JSON object under a prefix: none of the API's fields
        "/other/v1/sessions": (200, {"status": "ok"}),
        "/other/v1/sessions/x": (200, {"status": "ok"}),
        "/other/v1/sessions/x/messages": (200, {"status": "ok"}),
        "/other/v1/memory": (200, {"status": "ok"}),
        "/v1/sessions/multi": (503, {"error": {"message": "upstream\nconnect error\r\n"}}),
        # a reverse proxy's error page, as it sends it
        "/v1/sessions/html": (502, b"<html>\n<body>\x1b[31mBad Gateway</body>\n</html>\n"),
    }

    authorization: ClassVar[str | None] = None  # what the last request carried

    def _answer(self) -> None:
        type(self).authorization = self.headers.get("authorization")
        status, answer = self.answers[self.path.split("?")[0]]
        body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        if self.path.startswith("/v1/sessions/gz"):  # a gateway that says gzip and is not
            self.send_header("content-encoding", "gzip")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def other_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotCascade)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("action", [["ls"], ["branch", "x"]])
def test_json_not_from_a_cascade_proxy_is_one_line_and_exit_3(
    other_url: str, action: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A 200 whose JSON the table cannot read names the URL, as a non-JSON answer does,
    instead of an AttributeError or KeyError traceback."""
    assert main(["sessions", "--url", other_url, *action]) == 3
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and other_url in err, err


def test_an_error_that_is_a_string_is_printed_as_the_message(
    other_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sessions", "--url", other_url, "show", "x"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "cascade-proxy sessions show: 404 no route", err


@pytest.mark.parametrize("key", ["sk-SECRET-ü", "sk-SECRET\n", "sk-SECRET "])
def test_a_key_no_header_can_carry_is_one_line_without_the_key(
    other_url: str, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key read from a file with its line break, or pasted with a space or a non-ASCII
    character: httpx's "Illegal header value" error quoted it (a secret, on stderr, in CI
    logs) as a proxy that cannot be reached, and a non-ASCII one was a traceback."""
    assert main(["sessions", "--url", other_url, "--api-key", key, "ls"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "the API key (--api-key) has" in err, err
    assert "SECRET" not in err, err


def test_text_the_terminal_cannot_encode_is_escaped_not_a_traceback(other_url: str) -> None:
    """On a terminal whose encoding is not UTF-8 (a latin-1 locale, PYTHONIOENCODING), a
    stored CJK model name or the table's own "…" and "→" are written as escapes."""
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "sessions", "--url", other_url, "show", "uni"],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "latin-1"},
        timeout=30,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"\\u6a21\\u578b \\u2192 \\u2026" in done.stdout, done.stdout


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_a_proxy_on_loopback_is_called_direct_whatever_the_egress_proxy(
    other_url: str,
    variable: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The environment that sets an egress proxy for the proxy's provider calls (README)
    is the CLI's too: a call to the proxy on this machine went to that egress proxy, the
    proxy key in its header, or failed as "cannot reach the proxy" when it refused."""
    monkeypatch.setenv(variable, f"http://127.0.0.1:{_closed_port()}")
    assert main(["sessions", "--url", other_url, "--api-key", "sk-test", "show", "uni"]) == 0
    assert "uni" in capsys.readouterr().out


def test_a_body_that_does_not_decode_is_one_line_and_exit_3(
    other_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A body whose content-encoding lies (a gateway in front): httpx's DecodingError is
    no TransportError, and was a traceback."""
    assert main(["sessions", "--url", other_url, "show", "gz"]) == 3
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and other_url in err, err


@pytest.mark.parametrize(
    ("command", "said"),
    [(["sessions", "show", "uni"], "uni"), (["memory", "ls"], "no facts in this scope")],
)
def test_a_server_setting_the_client_does_not_read_does_not_stop_it(
    other_url: str,
    command: list[str],
    said: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The client commands share the server's environment; a setting of the server alone
    that it refuses stopped them with exit 2. Of the server's settings they read only
    CASCADE_HOST and CASCADE_PORT, for the default URL, and still refuse a bad port."""
    for name, value in {
        "CASCADE_LOG_LEVEL": "bogus",
        "CASCADE_MAX_BODY_BYTES": "-5",
        "CASCADE_DB_POOLER": "session",
    }.items():
        monkeypatch.setenv(name, value)
    assert main([command[0], "--url", other_url, *command[1:]]) == 0
    assert said in capsys.readouterr().out
    monkeypatch.delenv("CASCADE_URL", raising=False)
    monkeypatch.setenv("CASCADE_HOST", "127.0.0.1")
    monkeypatch.setenv("CASCADE_PORT", other_url.rsplit(":", 1)[1])
    assert main(command) == 0
    assert said in capsys.readouterr().out
    monkeypatch.setenv("CASCADE_PORT", "abc")
    assert main(command) == 2
    # named as every other refusal of the command is, its action too
    said_by = f"cascade-proxy {command[0]} {command[1]}: CASCADE_PORT: "
    assert capsys.readouterr().err.startswith(said_by)


@pytest.mark.parametrize(
    ("flags", "env", "sources"),
    [
        (["--url", "{url}", "--api-key", "sk-SECRETKEY"], {}, ("(--url)", "(--api-key)")),
        (
            [],
            {"CASCADE_URL": "{url}", "OPENAI_API_KEY": "sk-SECRETKEY"},
            ("(CASCADE_URL)", "(OPENAI_API_KEY)"),
        ),
    ],
)
@pytest.mark.parametrize("command", [["sessions", "ls"], ["memory", "ls"]])
def test_a_key_beside_a_password_in_the_url_is_refused_naming_both(
    other_url: str,
    command: list[str],
    flags: list[str],
    env: dict[str, str],
    sources: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """httpx sends a URL's user and password as Basic auth in the one Authorization header,
    and the bearer key was dropped without a word: both given is one line and exit 2, naming
    where each came from and quoting neither."""
    url = other_url.replace("http://", "http://ops:TOPSECRET@")
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(url=url))
    assert main([*command, *(f.format(url=url) for f in flags)]) == 2
    out, err = capsys.readouterr()
    assert not out and len(err.strip().splitlines()) == 1, err
    assert "Authorization header" in err and all(s in err for s in sources), err
    assert "SECRET" not in err, err


def test_a_password_in_the_url_alone_is_sent_as_basic_auth(
    other_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a key, a reverse proxy's Basic auth in the URL still reaches it."""
    url = other_url.replace("http://", "http://ops:pw@")
    assert main(["sessions", "--url", url, "show", "uni"]) == 0
    assert _NotCascade.authorization == "Basic b3BzOnB3"  # ops:pw
    assert "uni" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "env", "hint"),
    [
        ([], {}, "(give the key with --api-key or CASCADE_API_KEY)"),
        (["--api-key", "sk-SECRET"], {}, "(the key sent came from --api-key)"),
        ([], {"OPENAI_API_KEY": "sk-SECRET"}, "(the key sent came from OPENAI_API_KEY)"),
    ],
)
def test_a_refused_key_is_named_by_where_it_came_from(
    other_url: str,
    flags: list[str],
    env: dict[str, str],
    hint: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A 401 told the user to give the key with --api-key even when one was given there, or
    when the agent's own OPENAI_API_KEY from the shell was the one sent."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["sessions", "--url", other_url, *flags, "show", "locked"]) == 5
    err = capsys.readouterr().err
    assert err.strip() == f"cascade-proxy sessions show: 401 invalid proxy key {hint}", err


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "ls"],
        ["sessions", "ls", "--offset", "5"],
        ["sessions", "show", "x"],
        ["sessions", "messages", "x"],
        ["sessions", "messages", "x", "--offset", "5"],
        ["memory", "ls"],
        ["memory", "ls", "--offset", "5"],
    ],
)
@pytest.mark.parametrize("flags", [[], ["--json"]])
def test_a_json_object_without_the_apis_fields_is_not_read_as_an_empty_answer(
    other_url: str, argv: list[str], flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A 200 from another JSON service (a wrong --url) was "no sessions", or a table of
    dashes, and exit 0: as if the proxy had nothing; with --json, its JSON as the API's. It
    names the URL and exits 3."""
    assert main([*argv, *flags, "--url", other_url + "/other"]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "answered 200 with JSON Cascade's API does not give" in captured.err, captured.err


def test_a_401_to_the_urls_basic_auth_names_it_not_a_missing_key(
    other_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a user and password in the URL the Authorization header was their Basic auth, so
    "give the key with --api-key" pointed at what could not be given beside them."""
    url = other_url.replace("http://", "http://ops:SECRET@")
    assert main(["sessions", "--url", url, "show", "locked"]) == 5
    err = capsys.readouterr().err
    assert err.strip() == (
        "cascade-proxy sessions show: 401 invalid proxy key "
        "(sent the URL's user and password as Basic auth)"
    ), err


def test_an_error_page_that_is_not_json_is_quoted_on_one_line(
    other_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reverse proxy's HTML error page was quoted line by line, a line of stderr each."""
    assert main(["sessions", "--url", other_url, "show", "html"]) == 3
    err = capsys.readouterr().err
    assert err == (
        "cascade-proxy sessions show: "
        f"{other_url} answered 502 with no JSON: <html> <body>\\x1b[31mBad Gateway</body> </html>\n"
    ), err


def test_an_error_message_over_several_lines_is_printed_on_one(
    other_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sessions", "--url", other_url, "show", "multi"]) == EXIT_BUSY  # a 503
    err = capsys.readouterr().err
    assert err == "cascade-proxy sessions show: 503 upstream connect error\n", err
