"""``sessions`` and ``memory`` given what no request can carry: an argument whose bytes are
not UTF-8 (the shell hands them over as surrogates), or a host name with an empty label or
one over 63 characters, which no DNS query carries. Each is a usage error, exit 2, on one
line, never a traceback (README "CLI")."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli import main


@pytest.fixture(autouse=True)
def _no_key_or_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CASCADE_URL", "CASCADE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    "argv",
    [
        ["memory", "add", "caf\udce9"],
        ["sessions", "show", "run-\udcff"],
        ["sessions", "ls", "--filter", "\udcff"],
    ],
)
def test_an_argument_that_is_not_utf8_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--url", "http://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "not UTF-8" in err and "Traceback" not in err


@pytest.mark.parametrize("host", ["a" * 64 + ".example", "a..b"])
def test_a_host_name_no_dns_query_carries_is_not_a_url(
    host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sessions", "ls", "--url", f"http://{host}:8080"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "not a URL" in err and "Traceback" not in err


@pytest.mark.parametrize("pem", [None, b"not a certificate\n"])
def test_an_ssl_cert_file_that_does_not_load_is_named_not_an_unwritten_answer(
    pem: bytes | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """httpx reads SSL_CERT_FILE for a proxy beyond loopback, and its OSError (no such file,
    or an SSLError for one that is no PEM) was taken for stdout's: "cannot write the
    answer", exit 1. It is a setting a retry never mends: named, exit 2."""
    path = tmp_path / "ca.pem"
    if pem is not None:
        path.write_bytes(pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(path))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    assert main(["sessions", "ls", "--url", "https://example.invalid:8443"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "SSL_CERT_FILE" in err and "cannot write" not in err, err


@pytest.mark.parametrize("url", ["http://127.0.0.1:1/\udcff", "http://\udcff:1"])
def test_a_cascade_url_that_is_not_utf8_is_a_usage_error(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CASCADE_URL", url)
    assert main(["sessions", "ls"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "CASCADE_URL" in err and "not UTF-8" in err, err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["sessions", "branch", "run-1", "--new-id", "\udcff"], "--new-id holds"),
        (["sessions", "ls", "--filter", "\udcff"], "--filter holds"),
        (["memory", "accept", "s1", "--fact", "ok", "--fact", "\udcff"], "--fact holds"),
        (["memory", "suggestions", "--session", "\udcff"], "--session holds"),
        (["memory", "ls", "--scope", "\udcff"], "--scope holds"),
        (["memory", "add", "caf\udce9"], ": TEXT holds"),
        (["sessions", "show", "run-\udcff"], ": ID holds"),
    ],
)
def test_what_is_not_utf8_is_named_as_the_command_line_gives_it(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An option by its flag, a positional by the name its usage shows, never its value."""
    assert main([*argv, "--url", "http://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert named in err and "\\udcff" not in err and "\udcff" not in err, err
