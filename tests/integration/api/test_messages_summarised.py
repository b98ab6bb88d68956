"""``/messages`` labels a row folded into the summary ``summarised``, not what it was before.

An evicted result that a later compaction folds is in no prompt any more, neither its text
nor its placeholder: ``evicted`` would send a reader (the console, ``sessions show``) looking
for a placeholder in the window. Its raw output still pages back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import CLIENT_KEY, Agent, Stack, stack, words

SID = "folded"


def _rows(s: Stack) -> list[dict[str, Any]]:
    resp = httpx.get(
        f"{s.proxy.origin}/v1/sessions/{SID}/messages",
        headers={"authorization": f"Bearer {CLIENT_KEY}"},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    return list(resp.json()["data"])


def _tool_round(agent: Agent, i: int) -> None:
    call = {"id": f"call_{i}", "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path": "f{i}.py"}}'}}  # fmt: skip
    agent.messages += [
        {"role": "user", "content": f"read f{i}.py"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": words(500, f"file{i}")},
    ]
    agent.step()


def test_an_evicted_result_folded_into_the_summary_is_summarised_not_evicted(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    context = {
        "eviction": {"enabled": True, "atFraction": 0.2, "keepRecentRounds": 1,
                     "clearAtLeast": 200, "minResultTokens": 100},
    }  # fmt: skip
    summarize = {"background": False, "keepRecent": 2}
    with stack(tmp_path, db_dsn, fake_upstream, summarize=summarize, context=context) as s:
        agent = Agent(s.client(SID))
        for i in range(3):
            _tool_round(agent, i)
        before = {r["tool_call_id"]: r for r in _rows(s) if r["role"] == "tool"}
        assert before["call_0"]["evicted"] and not before["call_0"]["summarised"]
        agent.fill()
        (summary,) = s.summaries(SID)
        rows = _rows(s)
        after = {r["tool_call_id"]: r for r in rows if r["role"] == "tool"}
        assert after["call_0"]["pos"] < summary["boundary"]
        assert after["call_0"]["summarised"] and not after["call_0"]["evicted"]
        assert [r["summarised"] for r in rows] == [
            0 < r["pos"] < summary["boundary"] for r in rows
        ], "the system message is never folded, nor is what follows the boundary"
        resp = httpx.get(
            f"{s.proxy.origin}/v1/sessions/{SID}/tool-outputs/call_0",
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
            timeout=10,
        )
        assert resp.status_code == 200 and "file0" in resp.text, "its raw output pages back"
