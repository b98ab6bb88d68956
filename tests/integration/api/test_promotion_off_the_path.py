"""Memory promotion is off a request's path: a compaction the pressure started (the hard
threshold here, which a request waits for) answers once its summary is stored, and the
span's facts follow while the request goes on; the extraction is the fast model's second
call, and a slow one delayed the request that crossed the threshold by all of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fakes.replies import Pacer, RecordedRequest, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, Model, stack, wait_until, words


class HeldFacts(Model):
    """Briefings at once; the facts once :attr:`held` allows them (3 s of patience)."""

    def __init__(self) -> None:
        super().__init__()
        self.held = Pacer(patience=3.0, first=True)
        self.extractions = 0

    def __call__(self, req: RecordedRequest) -> Any:
        if "response_format" not in req.json:
            return super().__call__(req)
        self.extractions += 1
        return reply(json.dumps({"facts": ["The parser is src/parse.py"]}), pacer=self.held)


def test_a_request_at_the_hard_threshold_does_not_wait_for_the_facts(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = HeldFacts()
    summarize = {"softFraction": 0.8, "hardFraction": 0.8, "keepRecent": 2}
    context = {"memoryPromotion": {"mode": "auto"}}
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=summarize, context=context) as s:
        agent = Agent(s.client("hard-facts"))
        agent.say(words(1000, "a"))
        agent.say(words(1000, "b"))
        agent.say(words(1250, "c"))  # crosses hardFraction: compacts before it is sent
        assert len(s.summaries("hard-facts")) == 1
        assert s.query("SELECT fact FROM memory") == []  # the facts are still held
        assert not model.held.expired, "the request waited for the extraction"
        model.held.allow(10)
        facts = wait_until(lambda: s.query("SELECT fact, source_session FROM memory"))
    assert facts == [{"fact": "The parser is src/parse.py", "source_session": "hard-facts"}]
    assert model.extractions == 1
