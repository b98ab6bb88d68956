"""A session deleted while memory promotion waits on the fast model's facts.

The suggestion has no session left to be recorded in (an event belongs to a session), so
the promotion ends with an INFO line, as a compaction does (test_compaction_session_deleted),
not with a WARNING that sends the operator looking for a fault.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from tests.fakes.replies import Pacer, RecordedRequest, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, Model, stack, wait_until
from tests.integration.api.conftest import Records


class SlowFacts(Model):
    """Briefings at once; the facts of the folded span once :attr:`held` allows them."""

    def __init__(self) -> None:
        super().__init__()
        self.extractions: list[float] = []
        self.held = Pacer(first=True)

    def __call__(self, req: RecordedRequest) -> Any:
        if "response_format" not in req.json:
            return super().__call__(req)
        self.extractions.append(time.monotonic())
        return reply(json.dumps({"facts": ["The build uses uv"]}), pacer=self.held)


def test_deleting_a_session_mid_promotion_logs_info_not_a_warning(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, records: Records
) -> None:
    model = SlowFacts()
    promotion = {"memoryPromotion": {"mode": "suggest"}}
    with stack(tmp_path, db_dsn, fake_upstream, model, context=promotion) as s:
        agent = Agent(s.client("doomed"))
        agent.fill()
        wait_until(lambda: model.extractions, timeout=20, what="the extraction call")
        s.delete("doomed")
        model.held.allow(10)  # the facts come back only after the delete

        def memory() -> list[logging.LogRecord]:
            return [r for r in records.records if r.name == "cascade.memory"]

        wait_until(memory, timeout=20, what="the promotion's end")
        assert not model.held.expired
        lines = [(r.levelno, r.getMessage()) for r in memory()]
        assert lines == [(logging.INFO, "memory promotion for doomed: the session was deleted")]
        assert agent.say("a new start").startswith("ok")
