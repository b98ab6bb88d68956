"""``sessions ls``, ``memory ls`` and ``memory suggestions`` page by ``--cursor`` (the API's
``next_cursor``) as well as by ``--offset``: the two are two starts, a usage error together,
and a page with more after it names the next one's ``--cursor``, which rows made or gone
between the pages do not move as they move an offset."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy import cli_api
from proxy.cli import main
from proxy.cli_paging import next_page

LISTS = [["sessions", "ls"], ["memory", "ls"], ["memory", "suggestions"]]
URL = ["--url", "http://127.0.0.1:1"]  # nothing listens: a request would say so instead


@pytest.mark.parametrize("command", LISTS, ids=" ".join)
def test_offset_and_cursor_together_are_a_usage_error(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    for starts in (["--offset", "3", "--cursor", "abc"], ["--cursor", "abc", "--offset", "0"]):
        with pytest.raises(SystemExit) as usage:
            main([*command, *starts, *URL])
        assert usage.value.code == 2
        err = capsys.readouterr().err
        assert "--cursor" in err and "--offset" in err and "not allowed with" in err, err
        assert "cannot reach" not in err


def test_messages_take_no_cursor(capsys: pytest.CaptureFixture[str]) -> None:
    """A history's rows are read by position (``--offset``), which appends never move."""
    with pytest.raises(SystemExit) as usage:
        main(["sessions", "messages", "s1", "--cursor", "abc", *URL])
    assert usage.value.code == 2 and "--cursor" in capsys.readouterr().err


@pytest.mark.parametrize("command", LISTS, ids=" ".join)
def test_a_cursor_is_sent_instead_of_the_offset(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sent: list[dict[str, Any]] = []

    def answer(method: str, url: str, **kw: Any) -> httpx.Response:
        sent.append(dict(kw["params"]))
        body = {"object": "list", "data": [], "has_more": False, "next_cursor": None}
        return httpx.Response(200, json=body, request=httpx.Request(method, url))

    monkeypatch.setattr(cli_api.httpx, "request", answer)
    assert main([*command, "--cursor", "eyJhIjoxfQ", "--limit", "5", *URL]) == 0
    assert main([*command, "--offset", "4", *URL]) == 0
    assert main([*command, "--cursor", "", *URL]) == 0  # "$NEXT" unset: the first page
    starts = [{k: p.get(k) for k in ("limit", "offset", "cursor")} for p in sent]
    assert starts == [
        {"limit": 5, "offset": None, "cursor": "eyJhIjoxfQ"},
        {"limit": 100, "offset": 4, "cursor": None},
        {"limit": 100, "offset": 0, "cursor": None},
    ]
    out = capsys.readouterr().out
    assert "past that --cursor (the list ends there)" in out.splitlines()[0], out


@pytest.mark.parametrize("command", LISTS, ids=" ".join)
def test_an_empty_page_past_a_start_is_not_an_empty_list(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows before an offset or a cursor may still be there (pending suggestions read on a
    first page and not answered yet): an empty page there says where it was read, not that
    the key has none, as a first page does."""

    def answer(method: str, url: str, **kw: Any) -> httpx.Response:
        body = {"object": "list", "data": [], "has_more": False, "next_cursor": None}
        return httpx.Response(200, json=body, request=httpx.Request(method, url))

    monkeypatch.setattr(cli_api.httpx, "request", answer)
    said = []
    for start in (["--offset", "4"], ["--cursor", "eyJhIjoxfQ"], []):
        assert main([*command, *start, *URL]) == 0
        said.append(capsys.readouterr().out.strip())
    assert "at --offset 4 or past it" in said[0] and "at most 4)" in said[0], said
    assert said[1].endswith("past that --cursor (the list ends there)"), said
    assert said[2].startswith("no ") and "past" not in said[2], said


def test_the_note_names_the_next_cursor_where_the_list_gives_one() -> None:
    rows = [{"id": "a"}, {"id": "b"}]
    note = next_page(2, 0)
    assert note({"data": rows, "has_more": True, "next_cursor": "WyJ4Il0"}) == (
        "(more follow: --cursor WyJ4Il0)"
    )
    # a history (no next_cursor) still names the offset past the page
    assert next_page(2, 6)({"data": rows, "has_more": True}) == "(more follow: --offset 8)"
    assert note({"data": rows, "has_more": False, "next_cursor": None}) is None
    # text no shell takes as one word is quoted, and no control character reaches stderr
    said = note({"data": rows, "has_more": True, "next_cursor": "a b\x1b[31m"})
    assert said == "(more follow: --cursor 'a b\\x1b[31m')"


def test_no_pending_suggestions_of_one_session_name_the_session(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--session`` asks of one session: none there is not none for the key."""

    def answer(method: str, url: str, **kw: Any) -> httpx.Response:
        body = {"object": "list", "data": [], "has_more": False, "next_cursor": None}
        return httpx.Response(200, json=body, request=httpx.Request(method, url))

    monkeypatch.setattr(cli_api.httpx, "request", answer)
    assert main(["memory", "suggestions", "--session", "s1", *URL]) == 0
    assert capsys.readouterr().out.strip() == "no pending suggestions (for session s1)"
    assert main(["memory", "suggestions", *URL]) == 0
    assert capsys.readouterr().out.strip() == "no pending suggestions (for this API key)"


def test_no_sessions_matching_a_filter_say_the_filter(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--filter`` keeps the sessions that match: none matching is not none for the key,
    on a first page or past a start; and past an offset, at most that many match, which
    says nothing of how many the key has."""

    def answer(method: str, url: str, **kw: Any) -> httpx.Response:
        body = {"object": "list", "data": [], "has_more": False, "next_cursor": None}
        return httpx.Response(200, json=body, request=httpx.Request(method, url))

    monkeypatch.setattr(cli_api.httpx, "request", answer)
    said = []
    for start in ([], ["--offset", "5"], ["--cursor", "eyJhIjoxfQ"]):
        assert main(["sessions", "ls", "--filter", "web", *start, *URL]) == 0
        said.append(capsys.readouterr().out.strip())
    assert said == [
        'no sessions matching "web" (for this API key)',
        'no sessions matching "web" at --offset 5 or past it (at most 5 match, for this API key)',
        'no sessions matching "web" past that --cursor (the list ends there)',
    ]
