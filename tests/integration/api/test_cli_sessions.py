"""``cascade-proxy sessions …`` against a running proxy: every action, as a table and as JSON."""

from __future__ import annotations

import json

import httpx
import pytest

from proxy import cli
from tests.integration.api.conftest import ProxyServer, replied

KEY = "sk-test-client"


def _chat(http: httpx.Client, sid: str, text: str) -> None:
    resp = http.post(
        "/v1/chat/completions",
        headers={"X-Session-Id": sid},
        json={"model": "m", "messages": [{"role": "user", "content": text}]},
    )
    assert resp.status_code == 200, resp.text
    replied(http, sid)  # what the CLI then lists and shows includes the reply


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["sessions", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_sessions_action_prints_a_table_or_json(
    http: httpx.Client,
    proxy: ProxyServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _chat(http, "cli-one", "first question\nover two lines")
    _chat(http, "cli-two", "second")
    url = ["--url", proxy.origin]
    monkeypatch.setenv("CASCADE_API_KEY", KEY)  # the key from the environment

    code, out, _ = _run(capsys, *url, "ls")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == [
        *("ID", "AGENT", "MODEL", "MESSAGES", "OCCUPANCY", "RECLAIMED", "UPDATED")
    ]
    assert {r.split()[0] for r in rows} == {"cli-one", "cli-two"}
    # occupancy as the session view gives it (the estimate when the provider gave no usage)
    shown = {r.split()[0]: r.split()[4] for r in rows}
    occupancy = http.get("/v1/sessions/cli-one").json()["occupancy"]
    assert occupancy and shown["cli-one"] == str(occupancy)
    code, out, _ = _run(capsys, "ls", "--json", *url)  # options after the action too
    assert {s["id"] for s in json.loads(out)["data"]} == {"cli-one", "cli-two"}
    code, out, _ = _run(capsys, *url, "ls", "--limit", "1")
    assert len(out.splitlines()) == 2

    code, out, _ = _run(capsys, *url, "show", "cli-one")
    assert code == 0 and "message_count" in out and "context_limit" in out
    assert out.splitlines()[0].split() == ["id", "cli-one"]
    # what each stage took out of the current history, as the view's `reclaimed` says
    (line,) = [x for x in out.splitlines() if x.split()[0] == "reclaimed"]
    assert line.split(None, 1)[1] == "eviction 0, truncation 0, summarisation 0"
    code, out, _ = _run(capsys, *url, "--json", "show", "cli-one")
    assert json.loads(out)["id"] == "cli-one"

    code, out, _ = _run(capsys, *url, "messages", "cli-one")
    header, *rows = out.splitlines()
    assert header.split() == ["POS", "ROLE", "TOKENS", "FLAGS", "CONTENT"]
    assert "first question over two lines" in rows[0] and rows[0].split()[1] == "user"
    assert rows[1].split()[1] == "assistant"
    code, out, _ = _run(capsys, *url, "messages", "--json", "cli-one")
    assert [m["role"] for m in json.loads(out)["data"]] == ["user", "assistant"]

    code, out, _ = _run(capsys, *url, "compact", "cli-one")
    assert code == 0 and out.startswith("cli-one: ")

    code, out, _ = _run(capsys, *url, "branch", "cli-one", "--new-id", "cli-copy")
    assert (code, out.strip()) == (0, "branched cli-one into cli-copy")
    code, out, _ = _run(capsys, *url, "branch", "--json", "cli-one")
    assert json.loads(out)["parent_id"] == "cli-one"

    code, out, _ = _run(capsys, *url, "reset", "cli-one")
    assert code == 0 and out.startswith("reset cli-one")
    code, out, _ = _run(capsys, *url, "rm", "cli-copy")
    assert (code, out.strip()) == (0, "deleted cli-copy")
    code, out, err = _run(capsys, *url, "show", "cli-copy")
    assert (code, out) == (4, "")
    # (the proxy's own log lines share stderr in this process)
    assert "cascade-proxy sessions show: 404 no session 'cli-copy'" in err
    code, out, _ = _run(capsys, *url, "--json", "show", "cli-copy")
    assert code == 4 and json.loads(out)["error"]["code"] == "not_found"

    monkeypatch.delenv("CASCADE_API_KEY")  # another tenant: nothing of this one's
    monkeypatch.setenv("OPENAI_API_KEY", "sk-someone-else")
    code, out, _ = _run(capsys, *url, "ls")
    assert (code, out.strip()) == (0, "no sessions (for this API key)")


def test_stored_text_never_reaches_the_terminal_as_control_characters(
    http: httpx.Client, proxy: ProxyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # a tool result, a reply or another client of the tenant can store any text; printed
    # raw, ESC, OSC and C1 sequences recolour, retitle or rewrite the operator's terminal
    hostile = "\x1b[31mRED\x1b[0m \x1b]0;title\x07 \rover \b\x9b31m"
    resp = http.post(
        "/v1/chat/completions",
        headers={"X-Session-Id": "cli-esc"},
        json={"model": "m\x1b[2J", "messages": [{"role": "user", "content": hostile}]},
    )
    assert resp.status_code == 200, resp.text
    url = ["--url", proxy.origin, "--api-key", KEY]
    for action in (["ls"], ["show", "cli-esc"], ["messages", "cli-esc"]):
        code, out, err = _run(capsys, *url, *action)
        assert code == 0, err
        assert not any(ord(c) < 0x20 and c != "\n" or 0x7F <= ord(c) < 0xA0 for c in out), out
    assert "\\x1b[31mRED" in out


def test_a_full_page_says_where_the_next_one_starts(
    http: httpx.Client, proxy: ProxyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # the default pages (100 sessions, 1000 messages) ended with no sign that more exist
    for sid in ("p1", "p2", "p3"):
        _chat(http, sid, "hi")
    url = ["--url", proxy.origin, "--api-key", KEY]
    code, out, err = _run(capsys, *url, "ls", "--limit", "2")
    assert code == 0 and len(out.splitlines()) == 3
    assert "(more follow: --cursor " in err  # the list's next_cursor
    code, out, err = _run(capsys, *url, "ls", "--limit", "2", "--offset", "2")
    assert code == 0 and len(out.splitlines()) == 2 and "more" not in err
    code, out, err = _run(capsys, *url, "messages", "p1", "--limit", "1")
    assert "(more follow: --offset 1)" in err  # a history pages by position
    # a page that is full and the last (the API's has_more): no note of more that is not there
    code, out, err = _run(capsys, *url, "ls", "--limit", "3")
    assert code == 0 and len(out.splitlines()) == 4 and "more" not in err


def test_a_page_past_the_end_says_so_rather_than_that_there_are_none(
    http: httpx.Client, proxy: ProxyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # "ls --offset 50" with three sessions printed "no sessions (for this API key)", as if the
    # key had none; an empty page past an offset says only that there are no more than it
    for sid in ("e1", "e2", "e3"):
        _chat(http, sid, "hi")
    url = ["--url", proxy.origin, "--api-key", KEY]
    code, out, _ = _run(capsys, *url, "ls", "--offset", "50")
    assert (code, out.strip()) == (
        0,
        "no sessions at --offset 50 or past it (this API key has at most 50)",
    )
    code, out, _ = _run(capsys, *url, "messages", "e1", "--offset", "7")
    assert (code, out.strip()) == (
        0,
        "no messages at --offset 7 or past it (e1 has at most 7)",
    )
    code, out, _ = _run(capsys, *url, "ls", "--offset", "3")
    assert out.strip().startswith("no sessions at --offset 3 or past it")
    code, out, _ = _run(capsys, *url, "ls", "--offset", "2")
    assert out.splitlines()[0].split()[0] == "ID"


def test_a_full_page_says_where_the_next_one_starts_with_json_too(
    http: httpx.Client, proxy: ProxyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # with --json the note was left out: a script paging with it got no word of more, and
    # stdout, which it parses, stays the API's JSON alone since the note goes to stderr
    for sid in ("p1", "p2", "p3"):
        _chat(http, sid, "hi")
    url = ["--url", proxy.origin, "--api-key", KEY, "--json"]
    code, out, err = _run(capsys, *url, "ls", "--limit", "2")
    assert code == 0 and len(json.loads(out)["data"]) == 2
    assert f"(more follow: --cursor {json.loads(out)['next_cursor']})" in err
    code, out, err = _run(capsys, *url, "messages", "p1", "--limit", "1")
    assert code == 0 and len(json.loads(out)["data"]) == 1
    assert "(more follow: --offset 1)" in err
    code, out, err = _run(capsys, *url, "ls", "--limit", "2", "--offset", "2")
    assert code == 0 and "more" not in err


def test_ls_pages_by_cursor_past_a_session_made_between_the_pages(
    http: httpx.Client, proxy: ProxyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # --offset counted rows from the front, where a session made between two pages goes:
    # the next page began one row back, repeating the last one shown and never reaching
    # the last one; the note's --cursor names the place after the last row shown
    for sid in ("c1", "c2", "c3"):
        _chat(http, sid, "hi")
    url = ["--url", proxy.origin, "--api-key", KEY]
    code, out, err = _run(capsys, *url, "ls", "--limit", "2")
    assert [r.split()[0] for r in out.splitlines()[1:]] == ["c3", "c2"]
    cursor = err.split("(more follow: --cursor ")[1].split(")")[0]
    _chat(http, "c4", "hi")
    code, out, err = _run(capsys, *url, "ls", "--limit", "2", "--cursor", cursor)
    assert code == 0 and [r.split()[0] for r in out.splitlines()[1:]] == ["c1"], out
    assert "more" not in err
    code, out, _ = _run(capsys, *url, "ls", "--limit", "2", "--offset", "2")
    assert out.splitlines()[1].split()[0] == "c2"  # what an offset did: c2 again
    # an empty page past a cursor (its last session deleted since) says the list ends
    # there, not that the key has no sessions
    assert _run(capsys, *url, "rm", "c1")[0] == 0
    code, out, _ = _run(capsys, *url, "ls", "--cursor", cursor)
    assert (code, out.strip()) == (0, "no sessions past that --cursor (the list ends there)")


def test_a_cursor_no_page_gave_is_the_apis_400_naming_the_option(
    proxy: ProxyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--url", proxy.origin, "--api-key", KEY]
    code, _, err = _run(capsys, *url, "ls", "--cursor", "not-a-cursor")
    assert code == 1 and "400 'cursor' is no cursor a page gave" in err, err
    code, _, err = _run(capsys, *url, "ls", "--cursor", "x" * 1001)
    assert code == 1 and "400 --cursor: String should have at most 1000" in err, err


def test_the_client_base_url_the_banner_prints_is_taken_as_the_origin(
    http: httpx.Client,
    proxy: ProxyServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # http://host:port/v1, what a client is given, answered "404 no route GET /v1/v1/sessions"
    _chat(http, "cli-base", "hi")
    for given in (proxy.url, f"{proxy.url}/"):
        code, out, err = _run(capsys, "--url", given, "--api-key", KEY, "ls")
        assert code == 0, err
        assert out.splitlines()[1].split()[0] == "cli-base"
    monkeypatch.setenv("CASCADE_URL", proxy.url)
    code, out, err = _run(capsys, "--api-key", KEY, "show", "cli-base")
    assert code == 0 and out.splitlines()[0].split() == ["id", "cli-base"], err
    # any other path is kept: a proxy mounted under a prefix is reached there
    code, _, err = _run(capsys, "--url", f"{proxy.url}/v1", "--api-key", KEY, "ls")
    assert code == 1 and "/v1/v1/v1/sessions" in err


def test_a_limit_the_api_refuses_is_named_as_the_option(
    proxy: ProxyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # the API's upper bounds are its own (1000 sessions, 10000 messages a page); its 400
    # named "query.limit", a parameter the user never typed: now a usage error (exit 2)
    # names the option and the bound before any request, in text and JSON modes alike
    url = ["--url", proxy.origin, "--api-key", KEY]
    for argv, said in [
        (["ls", "--limit", "5000"], "5000 is above 1000"),
        (["messages", "s1", "--limit", "20000"], "20000 is above 10000"),
        (["--json", "ls", "--limit", "5000"], "5000 is above 1000"),
    ]:
        with pytest.raises(SystemExit) as usage:
            _run(capsys, *url, *argv)
        assert usage.value.code == 2
        err = capsys.readouterr().err
        assert f"argument --limit: {said}, the largest the API takes" in err, err
    code, out, _ = _run(capsys, *url, "ls", "--limit", "1000")
    assert code == 0, out  # the largest is taken


def test_sessions_ls_filter_lists_the_sessions_whose_id_agent_or_model_holds_it(
    http: httpx.Client, proxy: ProxyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # the console's filter (GET /v1/sessions?q=) from a shell: a tenant with thousands of
    # sessions finds one without paging through them
    for sid in ("build-7", "Build-8", "other"):
        _chat(http, sid, "hi")
    url = ["--url", proxy.origin, "--api-key", KEY]
    code, out, _ = _run(capsys, *url, "ls", "--filter", "bUiLd")
    assert code == 0
    assert {r.split()[0] for r in out.splitlines()[1:]} == {"build-7", "Build-8"}
    code, out, _ = _run(capsys, *url, "ls", "--filter", "nothing-holds-this")
    assert code == 0 and "build" not in out
