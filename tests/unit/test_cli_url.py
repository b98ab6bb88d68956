"""The proxy's URL as ``sessions`` and ``memory`` use it: one with a query or a fragment is
refused before any request, and a proxy that takes the request and never answers is told
apart from one that cannot be reached."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from proxy.cli import main


@pytest.fixture(autouse=True)
def _no_key_or_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CASCADE_URL", "CASCADE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("command", [["sessions", "ls"], ["memory", "ls"]])
@pytest.mark.parametrize("tail", ["/p?token=SECRET", "/?SECRET", "/p#SECRET", "?"])
def test_a_url_with_a_query_or_a_fragment_is_refused_without_quoting_it(
    command: list[str], tail: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The API's path goes after the URL, so a query or a fragment took it in (``/p?token=…``
    asked ``GET /p?limit=…``, some other resource): a usage error naming the option; a query
    may hold a token, so it is not quoted."""
    assert main([*command, "--url", "http://127.0.0.1:1" + tail]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cascade-proxy {command[0]} ls: the URL (--url) has a query"), err
    assert "SECRET" not in err and len(err.strip().splitlines()) == 1, err


def test_a_proxy_that_takes_the_request_and_never_answers_is_no_answer_within_the_wait(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read that timed out said "cannot reach the proxy … timed out", as if nothing
    listened; the proxy had the request, and a compaction may still finish there."""
    monkeypatch.setattr("proxy.cli_api.WAIT_SECONDS", 0.2)
    with socket.socket() as listener:  # the kernel accepts the connection; nobody answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        assert main(["sessions", "compact", "s1", "--url", url]) == 3
    err = capsys.readouterr().err
    assert err == (
        f"cascade-proxy sessions compact: no answer from the proxy at {url} within 0.2 s: "
        "it had the request, which may still complete there\n"
    ), err


def _trickle(listener: socket.socket, stop: threading.Event) -> None:
    """Take one request and answer it a header line at a time, each well within a read's
    timeout, for 3 s (a client that waits for it all fails its test, not hangs it)."""
    conn, _ = listener.accept()
    with conn:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
        for _ in range(60):
            if stop.wait(0.05):
                return
            try:
                conn.sendall(b"X-Pad: 1\r\n")
            except OSError:  # the client left
                return


@pytest.mark.parametrize("command", [["sessions", "compact", "s1"], ["memory", "ls"]])
def test_a_proxy_that_answers_a_byte_at_a_time_is_cut_at_the_wait(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The wait bounded each read, not the answer: a server (or a middlebox) sending a line
    of headers every moment held the command for ever, past any cron job's slot."""
    monkeypatch.setattr("proxy.cli_api.WAIT_SECONDS", 0.3)
    stop = threading.Event()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        server = threading.Thread(target=_trickle, args=(listener, stop), daemon=True)
        server.start()
        began = time.monotonic()
        try:
            assert main([*command, "--url", url]) == 3
        finally:
            stop.set()
        assert time.monotonic() - began < 1.5
    err = capsys.readouterr().err
    assert f"no answer from the proxy at {url} within 0.3 s" in err, err


def _answer_then_close(listener: socket.socket, sent: bytes | None) -> None:
    """Take one request, send ``sent`` (part of an answer, or nothing), then close; for None,
    reset the connection instead (a close with no linger sends RST)."""
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(5)
        conn.recv(65536)
        if sent is None:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            conn.sendall(sent)


@pytest.mark.parametrize(
    "sent",
    [
        b"",
        b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 99\r\n\r\n{"id"',
        None,
    ],
    ids=["nothing", "part_of_a_body", "reset"],
)
def test_a_proxy_that_breaks_off_its_answer_is_not_one_that_cannot_be_reached(
    sent: bytes | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A connection cut once the proxy had the request said "cannot reach the proxy", as if
    nothing listened; the proxy had it, and a compaction may have completed there."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        server = threading.Thread(target=_answer_then_close, args=(listener, sent))
        server.start()
        assert main(["sessions", "compact", "s1", "--url", url]) == 3
        server.join(5)
    err = capsys.readouterr().err
    assert err.startswith(
        f"cascade-proxy sessions compact: the proxy at {url} broke off its answer ("
    ), err
    assert err.endswith("): it had the request, which may have completed there\n"), err
    assert "cannot reach" not in err and len(err.splitlines()) == 1, err


def test_a_proxy_that_cannot_be_reached_is_named_with_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every other error line starts ``cascade-proxy <command> <action>:``; this one did not."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["memory", "ls", "--url", f"http://127.0.0.1:{port}"]) == 3
    err = capsys.readouterr().err
    assert err.startswith(
        f"cascade-proxy memory ls: cannot reach the proxy at http://127.0.0.1:{port}: "
    ), err


def test_a_connection_never_made_is_cannot_reach_not_a_request_in_flight(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A host that drops the SYN (a firewall, a full backlog) was, at the wait's end, "no
    answer … it had the request, which may still complete there": nothing was sent."""
    monkeypatch.setattr("proxy.cli_api.WAIT_SECONDS", 1.0)
    monkeypatch.setattr("proxy.cli_api.CONNECT_SECONDS", 0.3)
    with socket.socket() as listener:  # backlog 0, filled: the kernel drops the next SYN
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        filling = [socket.socket() for _ in range(3)]
        for s in filling:
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
        try:
            assert main(["sessions", "compact", "s1", "--url", f"http://127.0.0.1:{port}"]) == 3
        finally:
            for s in filling:
                s.close()
    err = capsys.readouterr().err
    assert "cannot reach the proxy" in err and "had the request" not in err, err
    assert "no connection within 0.3 s" in err, err
