"""A session deleted while its background compaction waits on the fast model.

The compaction finds the history gone when the summary comes back; it has no session left
to report to (an event belongs to a session), so it ends quietly instead of failing on the
event's foreign key and leaving an unretrieved exception for asyncio to log as an error.
"""

from __future__ import annotations

import gc
import logging
import time
from pathlib import Path

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, Model, stack, wait_until
from tests.integration.api.conftest import Records


def test_deleting_a_session_mid_compaction_logs_no_error(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, records: Records
) -> None:
    model = Model(fast_delay=1.0)
    with stack(tmp_path, db_dsn, fake_upstream, model) as s:
        agent = Agent(s.client("doomed"))
        agent.fill()
        wait_until(lambda: model.fast_times, what="the fast model's call")
        s.delete("doomed")
        time.sleep(1.5)  # the briefing comes back and the compaction ends
        gc.collect()  # a task that ended with an unretrieved exception is logged here
        errors = [r.getMessage() for r in records.records if r.levelno >= logging.ERROR]
        assert errors == []
        assert agent.say("a new start").startswith("ok")
