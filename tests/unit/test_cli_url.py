"""The proxy's URL as ``sessions`` and ``memory`` use it: one with a query or a fragment is
refused before any request, and a proxy that takes the request and never answers is told
apart from one that cannot be reached."""

from __future__ import annotations

import socket

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
        assert main(["sessions", "compact", "s1", "--url", url]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"no answer from the proxy at {url} within 0.2 s: it had the request, "
        "which may still complete there\n"
    ), err
