"""The session view's usage split and reclaimed-by-stage, and the message list's marks: what
the web console's usage panel and message list read (issue 26)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, Model, stack
from tests.integration.api.sessions_helpers import (
    BIG_OUTPUT,
    LIMIT,
    MAX_CHARS,
    chat,
    config_path,  # noqa: F401  (the module's config: a small maxChars)
    messages_of,
    settled,
    tool_history,
    user,
)
from tests.integration.api.test_compact_command import SUMMARIZE, history, http as compact_http


def test_usage_is_split_by_part_and_truncation_shows_as_reclaimed(http: httpx.Client) -> None:
    system = {"role": "system", "content": "You are terse. " * 40}
    chat(http, [system, *tool_history()], sid="split")
    view = settled(http, "split", 5)
    usage = view["usage"]
    assert set(usage) == {"system", "summary", "messages", "tool_results"}
    assert usage["system"] > 0 and usage["messages"] > 0 and usage["tool_results"] > 0
    assert usage["summary"] == 0
    # the tool result was cut to MAX_CHARS at ingestion: what it lost is truncation's
    cut = view["reclaimed"]["truncation"]
    assert (len(BIG_OUTPUT) - MAX_CHARS) // 4 <= cut <= len(BIG_OUTPUT) // 4
    assert view["reclaimed"]["eviction"] == 0
    assert view["reclaimed"]["summarisation"] == 0


def test_a_session_without_tools_reclaims_nothing(http: httpx.Client) -> None:
    chat(http, [user("hello")], sid="plain")
    view = settled(http, "plain", 2)
    assert view["reclaimed"] == {"eviction": 0, "truncation": 0, "summarisation": 0}
    assert view["usage"]["tool_results"] == 0 and view["usage"]["system"] == 0
    assert view["usage"]["messages"] > 0


def test_messages_name_their_tool_call_and_mark_a_truncated_result(http: httpx.Client) -> None:
    chat(http, tool_history(), sid="marks")
    settled(http, "marks", 4)
    rows = messages_of(http, "marks")
    tool = [r for r in rows if r["role"] == "tool"]
    assert [(r["tool_call_id"], r["truncated"], r["evicted"]) for r in tool] == [
        ("call_ls", True, False)
    ]
    assert all(r["tool_call_id"] is None and not r["truncated"] for r in rows if r not in tool)
    page = http.get("/v1/sessions/marks/tool-outputs/call_ls", params={"offset": 0, "limit": 50})
    assert page.status_code == 200 and "line 0000" in page.json()["page"]


def test_a_compaction_shows_its_summary_in_the_usage_and_as_reclaimed(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, Model(), summarize=SUMMARIZE) as s:
        history(Agent(s.client("folded")))
        with compact_http(s) as h:
            out = h.post("/v1/sessions/folded/compact").json()
            view = h.get("/v1/sessions/folded").json()
    assert view["usage"]["summary"] == round(view["summary"]["tokens"] * view["calibration"])
    assert view["usage"]["summary"] > 0
    assert view["reclaimed"]["summarisation"] == out["tokens_before"] - out["tokens_after"] > 0


def test_the_list_gives_each_session_its_models_context_limit(http: httpx.Client) -> None:
    chat(http, [user("hi")], sid="listed")
    settled(http, "listed", 2)
    (row,) = http.get("/v1/sessions").json()["data"]
    assert row["context_limit"] == LIMIT and row["message_count"] == 2


def test_the_sent_form_gives_a_cut_result_back_whole(http: httpx.Client) -> None:
    history = tool_history()
    chat(http, history, sid="sent")
    settled(http, "sent", 4)
    prompt = [r["message"] for r in messages_of(http, "sent")]
    sent = [r["message"] for r in messages_of(http, "sent", form="sent")]
    assert prompt[2]["content"] != BIG_OUTPUT  # cut to MAX_CHARS in the prompt form
    assert sent[:3] == history and sent[3] == prompt[3]
    # resent in that form, the history extends the stored one: nothing is superseded
    chat(http, [*sent, user("and now?")], sid="sent")
    view = settled(http, "sent", 6)
    assert view["superseded_count"] == 0
    assert http.get("/v1/sessions/sent/messages", params={"form": "raw"}).status_code == 400


def test_under_a_reused_id_only_the_result_that_was_cut_is_marked_truncated(
    http: httpx.Client,
) -> None:
    # call_ls every turn: the short results are whole, whatever the long one between them
    # went through, and the mark says which one pages back from a spill
    short = "three lines\nof a short\nlisting\n"
    history = [*tool_history(), user("again")]
    for content in (short, BIG_OUTPUT, short):
        _user, call, result = tool_history()
        history += [call, {**result, "content": content}]
    chat(http, history, sid="reused")
    settled(http, "reused", len(history) + 1)
    rows = messages_of(http, "reused")
    marks = [(r["pos"], r["truncated"]) for r in rows if r["role"] == "tool"]
    assert marks == [(2, True), (5, False), (7, True), (9, False)]
    assert [r["truncated"] for r in messages_of(http, "reused", form="sent")] == [
        r["truncated"] for r in rows
    ]
    for pos in (5, 9):
        page = http.get(f"/v1/sessions/reused/tool-outputs/call_ls@{pos}").json()
        assert page["total_chars"] == len(short)
