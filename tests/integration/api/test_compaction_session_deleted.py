"""A session deleted while its background compaction waits on the fast model.

The compaction finds the history gone when the summary comes back; it has no session left
to report to (an event belongs to a session), so it ends quietly instead of failing on the
event's foreign key and leaving an unretrieved exception for asyncio to log as an error.
"""

from __future__ import annotations

import gc
import logging
from pathlib import Path

from proxy.session_id import tenant_from_bearer
from tests.fakes.replies import Pacer
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import CLIENT_KEY, Agent, Model, stack, wait_until
from tests.integration.api.conftest import Records


def test_deleting_a_session_mid_compaction_logs_no_error(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, records: Records
) -> None:
    held = Pacer(first=True)  # the briefing, until the session is deleted
    model = Model(fast_pacer=held)
    with stack(tmp_path, db_dsn, fake_upstream, model) as s:
        agent = Agent(s.client("doomed"))
        agent.fill()
        wait_until(lambda: model.fast_times, 20, "the fast model's call")
        tenant = tenant_from_bearer(f"Bearer {CLIENT_KEY}")
        assert s.proxy.compacting(tenant, "doomed")
        s.delete("doomed")
        held.allow(10)
        # The briefing comes back and the compaction ends, however long that takes.
        wait_until(lambda: not s.proxy.compacting(tenant, "doomed"), 30, "the compaction's end")
        assert not held.expired
        gc.collect()  # a task that ended with an unretrieved exception is logged here
        errors = [r.getMessage() for r in records.records if r.levelno >= logging.ERROR]
        assert errors == []
        assert agent.say("a new start").startswith("ok")
