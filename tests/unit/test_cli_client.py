"""``cascade-proxy sessions`` and ``memory`` with a proxy URL they cannot use: one line on
stderr and exit status 2 (README, CLI), never a traceback."""

from __future__ import annotations

import socket

import pytest

from proxy.cli import main


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", [["sessions", "ls"], ["memory", "ls"]])
@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:99999", "127.0.0.1:8080"])
def test_a_malformed_url_is_one_line_and_exit_2(
    command: list[str], url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--url", url]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert url in err and "Traceback" not in err


def test_a_malformed_cascade_url_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CASCADE_URL", "http://[::1")
    assert main(["sessions", "show", "s1"]) == 2
    err = capsys.readouterr().err
    assert "CASCADE_URL" in err and len(err.strip().splitlines()) == 1, err


def test_no_proxy_listening_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "ls", "--url", f"http://127.0.0.1:{_closed_port()}"]) == 2
    assert "cannot reach the proxy" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["sessions", "ls"], ["memory", "ls"]])
def test_a_password_in_the_url_is_not_printed(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A proxy behind a reverse proxy's basic auth is reached as http://user:password@host;
    the error names the host, not the password (stderr ends up in CI logs)."""
    port = _closed_port()
    assert main([*command, "--url", f"http://ops:TOPSECRET@127.0.0.1:{port}"]) == 2
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
