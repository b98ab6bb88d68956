"""``/compact`` forces a compaction: the API endpoint, the CLI and a chat message (issue #4 item 5).

Histories here stay below ``softFraction``, so any summary is the forced one. The chat form is
answered by the proxy itself: neither that request nor any later prompt carries the exchange
to the agent's model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_prompts import canon, live_part, summary_of
from tests.integration.api.compaction_stack import (
    CLIENT_KEY,
    FAST,
    Agent,
    Model,
    Stack,
    stack,
    wait_until,
    words,
)

REPO = Path(__file__).resolve().parents[3]
SUMMARIZE = {"keepRecent": 2}


def http(s: Stack, key: str = CLIENT_KEY) -> httpx.Client:
    return httpx.Client(
        base_url=s.proxy.origin, headers={"authorization": f"Bearer {key}"}, timeout=10
    )


def history(agent: Agent, turns: int = 3) -> None:
    for i in range(turns):
        agent.say(words(200, f"t{i}"))


def assert_no_command_reached_the_model(s: Stack) -> None:
    for body in s.main_bodies():
        for m in body["messages"]:
            text = str(m.get("content") or "")
            assert text.strip() != "/compact" and not text.startswith("[cascade]"), m


# ----------------------------------------------------------------------------- the endpoint


def test_the_endpoint_forces_a_compaction(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, Model(), summarize=SUMMARIZE) as s:
        agent = Agent(s.client("api"))
        history(agent)
        assert s.summaries("api") == [], "below softFraction nothing compacts by itself"
        with http(s) as h:
            # sent the instant the last reply arrived: the fold's boundary counts it all the
            # same, the compaction waiting for the reply's store (test_compact_waits.py)
            resp = h.post("/v1/sessions/api/compact")
        assert resp.status_code == 200, resp.text
        out = resp.json()
        (row,) = s.summaries("api")
        assert out["version"] == row["version"] == 1
        assert out["boundary"] == row["boundary"] == len(agent.messages) - 2
        assert out["folded"] == row["boundary"] - 1  # everything after the system message
        assert out["tokens_after"] < out["tokens_before"]
        started, completed = s.events(
            "api", "context.compaction.started", "context.compaction.completed"
        )
        assert started["trigger"] == completed["trigger"] == "api"
        assert completed["summary_version"] == 1
        agent.say("next")
        last = s.main_bodies()[-1]
        assert summary_of(last) == row["content"]
        assert live_part(last) == canon(agent.messages[:1] + agent.messages[row["boundary"] : -1])


def test_the_endpoint_reports_when_there_is_nothing_to_fold(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model()
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"keepRecent": 8}) as s:
        Agent(s.client("short")).say("hi")
        with http(s) as h:
            resp = h.post("/v1/sessions/short/compact")
        assert resp.status_code == 200, resp.text
        out = resp.json()
        assert out["version"] is None and out["folded"] == 0
        assert out["tokens_before"] == out["tokens_after"]
        assert not model.fast_times and s.summaries("short") == []


def test_the_endpoint_is_scoped_by_tenant(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model()
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=SUMMARIZE) as s:
        history(Agent(s.client("mine")))
        with http(s) as h, http(s, "sk-someone-else") as other:
            missing = h.post("/v1/sessions/nope/compact")
            foreign = other.post("/v1/sessions/mine/compact")
        for resp in (missing, foreign):
            assert resp.status_code == 404
            assert set(resp.json()["error"]) == {"message", "type", "param", "code"}
        assert not model.fast_times and s.summaries("mine") == []


def test_the_cli_forces_a_compaction(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, Model(), summarize=SUMMARIZE) as s:
        agent = Agent(s.client("cli"))
        history(agent)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CASCADE_", "OPENAI_"))}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "proxy",
                "sessions",
                "--url",
                s.proxy.origin,
                "--api-key",
                CLIENT_KEY,
                "compact",
                "--json",
                "cli",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=REPO,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        (row,) = s.summaries("cli")
        assert (out["version"], out["boundary"]) == (1, row["boundary"])
        assert out["folded"] > 0 and out["tokens_after"] < out["tokens_before"]
        assert s.events("cli", "context.compaction.completed")[0]["trigger"] == "api"


# ----------------------------------------------------------------------------- the chat form


def _command_round(s: Stack, agent: Agent, *, stream: bool) -> str:
    before = len(s.main_bodies())
    answer = agent.say_stream("/compact") if stream else agent.say("/compact")
    assert len(s.main_bodies()) == before, "the /compact request reached the model"
    return answer


def _check_chat_command(s: Stack, agent: Agent, answer: str, session: str) -> None:
    (row,) = s.summaries(session)
    folded = row["boundary"] - 1
    assert answer.startswith("[cascade] ")
    assert f"Compacted {folded} messages into summary v1" in answer
    assert len(s.fast_bodies()) == 1 and s.fast_bodies()[0]["model"] == FAST
    assert s.events(session, "context.compaction.completed")[0]["trigger"] == "command"
    agent.say("so where were we?")
    agent.say("and then?")
    last = s.main_bodies()[-1]
    assert summary_of(last) == row["content"]
    expected = [
        m
        for m in agent.messages[row["boundary"] : -1]
        if m["content"] != "/compact" and not str(m["content"]).startswith("[cascade]")
    ]
    assert live_part(last) == canon(agent.messages[:1] + expected)
    assert_no_command_reached_the_model(s)


def test_a_chat_message_that_is_exactly_slash_compact_forces_a_compaction(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, Model(), summarize=SUMMARIZE) as s:
        agent = Agent(s.client("chat"))
        history(agent)
        answer = _command_round(s, agent, stream=False)
        _check_chat_command(s, agent, answer, "chat")


def test_slash_compact_works_when_streaming(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, Model(), summarize=SUMMARIZE) as s:
        agent = Agent(s.client("chat-stream"))
        history(agent)
        answer = _command_round(s, agent, stream=True)
        _check_chat_command(s, agent, answer, "chat-stream")


def test_slash_compact_with_nothing_to_fold_says_so_without_calling_anyone(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model()
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"keepRecent": 8}) as s:
        agent = Agent(s.client("nothing"))
        agent.say("hi")
        answer = _command_round(s, agent, stream=False)
        assert answer.startswith("[cascade] Nothing was compacted")
        assert not model.fast_times and s.summaries("nothing") == []
        agent.say("ok, carry on")
        assert_no_command_reached_the_model(s)


def test_a_message_merely_mentioning_slash_compact_goes_to_the_model(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model()
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=SUMMARIZE) as s:
        agent = Agent(s.client("mention"))
        history(agent)
        text = "what does /compact do?"
        assert agent.say(text) == "ok"
        assert s.main_bodies()[-1]["messages"][-1]["content"] == text
        assert not model.fast_times


@pytest.mark.parametrize(
    ("model", "why"),
    [
        (lambda: Model(fast_failures=100), "500"),  # the fast model fails every try
        (lambda: Model(brief=lambda req: "Sure! Here is a summary: it went fine."), "unusable"),
    ],
    ids=["failing", "no-briefing"],
)
def test_the_endpoint_answers_502_summary_failed_when_no_briefing_comes_back(
    model: Callable[[], Model], why: str, tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """The provider may well have answered, so "unreachable" would send the operator to the
    network: the code is the compaction event's reason, and the message says what was wrong."""
    with stack(tmp_path, db_dsn, fake_upstream, model(), summarize=SUMMARIZE) as s:
        history(Agent(s.client("down")))
        with http(s) as h:
            resp = h.post("/v1/sessions/down/compact")
        assert resp.status_code == 502, resp.text
        err = resp.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}
        assert (err["type"], err["code"]) == ("upstream_error", "summary_failed")
        assert "compaction failed" in err["message"] and why in err["message"], err
        assert s.summaries("down") == []


def test_slash_compact_as_a_new_sessions_first_request_folds_its_history(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """A session whose first request brings a long history holds its messages back until its
    step is stored (services.history); a compaction reads the store, so they go in first."""
    with stack(tmp_path, db_dsn, fake_upstream, Model(), summarize=SUMMARIZE) as s:
        agent = Agent(s.client("resumed"))
        for i in range(5):  # 11 messages: more than a session is guessed new with
            agent.messages += [
                {"role": "user", "content": words(200, f"t{i}")},
                {"role": "assistant", "content": f"done {i}"},
            ]
        answer = _command_round(s, agent, stream=False)
        _check_chat_command(s, agent, answer, "resumed")
        expected = list(range(len(agent.messages)))

        def stored() -> list[int]:
            rows = s.query(
                "SELECT pos FROM messages WHERE session_id = $1 AND superseded_at IS NULL"
                " ORDER BY pos",
                "resumed",
            )
            return [r["pos"] for r in rows]

        # A non-streamed reply is stored once its response is sent (a background task).
        wait_until(lambda: stored() == expected, what="the last reply stored")
        assert stored() == expected
