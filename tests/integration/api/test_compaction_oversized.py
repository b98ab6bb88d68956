"""A fast model that answers past the ``max_tokens`` it was given.

The summary call asks for a bounded briefing; a provider that ignores the bound (or a
model that rambles through a server which does not enforce it) can answer with a briefing
larger than the agent's whole window. Stored, it would go into every later prompt, and
every request of the session would be refused as too long, by a message the client never
wrote. Such an answer is unusable like one without sections: the compaction fails and the
session goes on, its pressure relieved by the overflow guard.
"""

from __future__ import annotations

from pathlib import Path

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, Model, stack, wait_until

RAMBLE = (
    "## Objective\nFix the parser\n\n## Decisions & Facts\n"
    + "- the parser keeps a list of every token it has ever seen, in order\n" * 2000
    + "\n## Files & State\n(none)\n\n## Open Tasks\n- finish the fix\n\n## Next Step\nrun the tests"
)


def test_a_briefing_far_past_its_bound_is_not_stored(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, Model(brief=lambda req: RAMBLE)) as s:
        agent = Agent(s.client("ramble"))
        agent.fill()
        failed = wait_until(
            lambda: s.events("ramble", "context.compaction.failed"), what="the failure"
        )
        assert "unusable summary" in failed[0]["error"]
        assert s.summaries("ramble") == []
        for i in range(3):  # the session still answers, over its soft threshold
            assert agent.say(f"and step {i}?") == "ok"
