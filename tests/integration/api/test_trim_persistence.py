"""With summarisation off, the overflow guard's cut is durable: one deep cut, then a stable prefix.

Re-trimming by one round at every step would change the prompt's prefix at every step (a
prompt-cache miss on everything); the proxy marks what it dropped and trims to a low watermark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_prompts import assert_paired, tool_round
from tests.integration.api.compaction_stack import CLIENT_KEY, Agent
from tests.integration.api.test_overflow_guard import small_window
from tests.integration.transcripts import api, read_all


def _is_prefix(prev: list[Any], cur: list[Any]) -> bool:
    return len(prev) <= len(cur) and cur[: len(prev)] == prev


def test_trimmed_rounds_stay_dropped_and_later_prompts_share_their_prefix(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with small_window(tmp_path, db_dsn, fake_upstream, summarize={"enabled": False}) as s:
        agent = Agent(s.client("trim-1"))
        agent.messages.append({"role": "user", "content": "Audit every module."})
        for n in range(24):
            agent.messages.extend(tool_round(n, 150))
            agent.step()
        bodies = s.main_bodies()
        trims = s.events("trim-1", "context.trimmed")
        assert trims, "the guard had to trim"
        assert len(trims) <= len(bodies) // 3, "trimming is batched, not once per step"
        pairs = zip(bodies, bodies[1:], strict=False)
        stable = sum(_is_prefix(a["messages"], b["messages"]) for a, b in pairs)
        assert stable >= len(bodies) - 1 - len(trims)
        for body in bodies:
            assert_paired(body["messages"])
            assert body["messages"][1]["content"] == "Audit every module."
        trimmed = s.query(
            "SELECT count(*) AS n FROM messages WHERE session_id = 'trim-1'"
            " AND trimmed_at IS NOT NULL"
        )[0]["n"]
        assert trimmed > 0
        dropped = sum(t["dropped_messages"] for t in trims)
        assert trimmed == dropped  # each trimmed message was dropped exactly once
        # A trim only keeps a row out of later prompts: a result never cut pages back whole
        # from its row (a related_context snippet names its id for read_tool_output too).
        cid = s.query(
            "SELECT tool_call_id FROM messages WHERE session_id = 'trim-1'"
            " AND trimmed_at IS NOT NULL AND role = 'tool' ORDER BY pos LIMIT 1"
        )[0]["tool_call_id"]
        sent = next(m for m in agent.messages if m.get("tool_call_id") == cid)
        with api(s.proxy, CLIENT_KEY) as http:
            assert read_all(http, "trim-1", cid) == sent["content"]
