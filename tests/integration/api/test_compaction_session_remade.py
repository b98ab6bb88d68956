"""A session deleted while its background compaction waits on the fast model, and made
again at once under the same id by a request resending the same history.

The deleted session's compaction must not land in the new one: its history hash check alone
passes there (the same messages), so without its claim on the session row it wrote the
deleted session's summary into the new session and reported a completion the new session's
events never saw start.
"""

from __future__ import annotations

from pathlib import Path

from proxy.session_id import tenant_from_bearer
from tests.fakes.replies import Pacer
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import (
    CLIENT_KEY,
    Agent,
    Model,
    compaction_events,
    stack,
    wait_until,
)


def test_a_compaction_of_a_deleted_session_stays_out_of_one_made_under_its_id(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    held = Pacer(first=True)  # the deleted session's briefing, until the new session exists
    model = Model(fast_pacer=held)
    tenant = tenant_from_bearer(f"Bearer {CLIENT_KEY}")
    with stack(tmp_path, db_dsn, fake_upstream, model) as s:
        agent = Agent(s.client("remade"))
        agent.fill()
        wait_until(lambda: model.fast_times, 20, "the fast model's call")
        s.delete("remade")
        assert agent.say("the same history, and one more turn").startswith("ok")
        assert len(model.fast_times) == 1  # the new session's compaction waits its turn
        held.allow(10)
        wait_until(lambda: not s.proxy.compacting(tenant, "remade"), 30, "the compaction's end")
        assert not held.expired
        assert s.summaries("remade") == []
        assert compaction_events(s, "remade") == []
        # The new session compacts on its own next turn, started and completed in it.
        agent.say("next")
        wait_until(lambda: len(compaction_events(s, "remade")) == 2, 30, "its own compaction")
        names = [e["name"] for e in compaction_events(s, "remade")]
        assert names == ["context.compaction.started", "context.compaction.completed"]
        assert [r["version"] for r in s.summaries("remade")] == [1]
