"""Black-box probes of the rolling summary: what the fast model is given, and a briefing that
would leave the prompt no smaller than before it.

A summary replaces the span it folds (and the summary before it) in every later prompt: one
longer than all of that makes each later request larger, and re-bills the whole prompt after
the first user message as a cache miss for nothing. Such a briefing is refused like an
unusable one when the pressure started the compaction: it fails and the previous state stays;
a compaction someone forced stores it (the summary was asked for).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from proxy.cascade.redaction import compile_patterns, redact
from tests.fakes.replies import RecordedRequest
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_prompts import summary_of, tool_round
from tests.integration.api.compaction_stack import (
    CLIENT_KEY,
    Agent,
    Model,
    briefing,
    stack,
    wait_until,
    words,
)
from tests.integration.api.conftest import ProxyServer

SECRET = "sk-proj-" + "Zq7" * 12


def test_the_fast_model_never_sees_a_secret_the_client_sent(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream) as s:
        agent = Agent(s.client("secret"))
        agent.say(f"my key is {SECRET}, use it for the deploy")
        agent.fill()
        wait_until(lambda: s.summaries("secret"), what="a summary")
        fast = s.fast_bodies()
        assert fast and all(SECRET not in str(b) for b in fast)
        assert all(SECRET not in str(b) for b in s.main_bodies())


def test_a_secret_the_model_wrote_reaches_neither_the_fast_model_nor_the_summary(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """Redaction runs on what clients send; a key the model itself wrote (in its reply, in a
    tool call's arguments) is stored as the provider sent it. The summary's input is redacted
    all the same, and so is the briefing stored, whatever the fast model writes."""
    written = "AKIA" + "QX7Z" * 4  # another key the fast model writes into its briefing
    model = Model(brief=lambda req: briefing(f"deploy.sh uses {written}"))
    summarize = {"background": False, "keepRecent": 2}
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=summarize) as s:
        agent = Agent(s.client("wrote"))
        call = {
            "id": "call_k",
            "type": "function",
            "function": {"name": "run", "arguments": f'{{"env": "OPENAI_KEY={SECRET}"}}'},
        }
        agent.messages += [
            {"role": "user", "content": "Set the deploy up."},
            {"role": "assistant", "content": f"I will export {SECRET} first."},
            {"role": "user", "content": "Go on."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_k", "content": "done"},
            *tool_round(1, 900),
            *tool_round(2, 900),
        ]
        agent.step()
        (row,) = s.summaries("wrote")
        assert row["boundary"] > 5  # the planted messages were folded
        fast = s.fast_bodies()
        assert fast and all(SECRET not in json.dumps(b) for b in fast)
        patterns = compile_patterns((), use_defaults=True)
        assert redact(row["content"], patterns)[1] == 0
        assert "deploy.sh uses" in row["content"] and written not in row["content"]
        assert written not in json.dumps(s.main_bodies())


def test_a_briefing_longer_than_what_it_replaces_is_not_stored(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    long_brief = briefing(objective=words(2400, "verbose"))  # under the 3000-token overrun
    with stack(tmp_path, db_dsn, fake_upstream, Model(brief=lambda req: long_brief)) as s:
        agent = Agent(s.client("long"))
        agent.fill()
        failed = wait_until(
            lambda: s.events("long", "context.compaction.failed"), what="the failure"
        )
        assert failed[0]["reason"] == "summary_failed"
        assert "no smaller" in failed[0]["error"]
        # the span it did not fold, as its start named it (docs/events.md), and as an
        # interrupted one's failure names it too
        (started,) = s.events("long", "context.compaction.started")
        span = ("from_pos", "to_pos")
        assert [failed[0].get(k) for k in span] == [started[k] for k in span], failed[0]
        assert s.summaries("long") == []
        assert agent.say("and now?") == "ok"
        forced = httpx.post(  # asked for, it is stored all the same
            f"{s.proxy.origin}/v1/sessions/long/compact",
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
            timeout=10,
        )
        assert forced.status_code == 200, forced.text
        assert len(s.summaries("long")) == 1


def test_the_fast_model_gets_the_previous_summary_but_no_block_the_proxy_adds(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """The ``<plan>`` recited at the tail, the ``<memory>`` block and the folded summary are the
    proxy's, not the conversation's: the summariser is given the previous summary once, as
    such, and none of them as a message; a restarted replica and a second one send the stored
    summary."""
    context = {"recitation": {"enabled": True}, "memoryPromotion": {"mode": "suggest"}}
    with stack(tmp_path, db_dsn, fake_upstream, replicas=2, context=context) as s:
        http = httpx.Client(
            base_url=s.proxy.origin, headers={"authorization": f"Bearer {CLIENT_KEY}"}
        )
        assert http.post("/v1/memory", json={"text": "The port is 8443"}).status_code == 201
        agent = Agent(s.client("blocks"))
        agent.fill()
        wait_until(lambda: s.summaries("blocks"), what="the first summary")
        agent.fill(4)
        wait_until(lambda: len(s.summaries("blocks")) >= 2, what="the second summary")
        main = s.main_bodies()
        assert any("<plan>" in str(b) for b in main) and any("<memory>" in str(b) for b in main)
        briefs = [b for b in s.fast_bodies() if "<previous_summary>" in str(b)]
        for body in briefs:
            text = str(body["messages"][-1]["content"])
            assert "<plan>" not in text and "<memory>" not in text
            assert "<conversation_summary>" not in text
        assert "## Objective\nFix the parser" in str(briefs[-1]["messages"][-1]["content"])
        latest = s.summaries("blocks")[-1]["content"]
        s.proxy.stop()
        s.servers[0] = ProxyServer(s.proxy.settings).start()
        for replica in (0, 1):
            agent.client = s.client("blocks", replica)
            agent.say("where were we?")
            assert summary_of(s.main_bodies()[-1]) == latest


def test_a_reflect_pass_that_comes_back_longer_is_not_kept(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """The reflect pass asks for a shorter briefing; an answer that is not shorter would only
    cost more in every later prompt, so the briefing it was asked to condense stays."""
    files = "\n".join(f"- `src/pkg/module_{i:03d}.py` is done" for i in range(120))
    longer = "\n".join(f"- `src/pkg/module_{i:03d}.py` is done, tests pass" for i in range(130))

    def brief(req: RecordedRequest) -> str:
        system = req.json["messages"][0]["content"]
        return briefing(longer) if "grown too long" in system else briefing(files)

    summarize = {"background": False, "reflectTokens": 300}
    with stack(tmp_path, db_dsn, fake_upstream, Model(brief=brief), summarize=summarize) as s:
        Agent(s.client("reflect-long")).fill()
        assert len(s.fast_bodies()) == 2  # the briefing, then the reflect pass
        (row,) = s.summaries("reflect-long")
        assert row["content"] == briefing(files)


def test_with_keep_recent_0_a_compaction_inside_a_request_keeps_its_message(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """The request that crosses the threshold is answered after the compaction it waits for:
    its own message must be in what the model gets, not only in the summary."""
    summarize = {"keepRecent": 0, "background": False}
    with stack(tmp_path, db_dsn, fake_upstream, summarize=summarize) as s:
        agent = Agent(s.client("keep0"))
        agent.fill(4)
        agent.say(words(450, "latest"))
        assert s.summaries("keep0")
        last = s.main_bodies()[-1]
        assert summary_of(last) is not None
        # the first user message after the boundary, it carries the summary, then itself
        assert str(last["messages"][-1]["content"]).endswith(agent.messages[-2]["content"])
