"""Black-box probes of the rolling summary: what the fast model is given, and a briefing that
would leave the prompt no smaller than before it.

A summary replaces the span it folds (and the summary before it) in every later prompt: one
longer than all of that makes each later request larger, and re-bills the whole prompt after
the first user message as a cache miss for nothing. Such a briefing is refused like an
unusable one when the pressure started the compaction: it fails and the previous state stays;
a compaction someone forced stores it (the summary was asked for).
"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import (
    CLIENT_KEY,
    Agent,
    Model,
    briefing,
    stack,
    wait_until,
    words,
)

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
        assert s.summaries("long") == []
        assert agent.say("and now?") == "ok"
        forced = httpx.post(  # asked for, it is stored all the same
            f"{s.proxy.origin}/v1/sessions/long/compact",
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
            timeout=10,
        )
        assert forced.status_code == 200, forced.text
        assert len(s.summaries("long")) == 1
