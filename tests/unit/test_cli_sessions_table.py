"""``cascade-proxy sessions messages``: the FLAGS column says each mark /messages gives."""

from __future__ import annotations

from proxy.cli_sessions import _messages


def test_a_result_cut_at_ingestion_is_flagged_truncated() -> None:
    body = {
        "data": [
            {
                "pos": 2,
                "role": "tool",
                "tokens": 504,
                "truncated": True,
                "evicted": True,
                "message": {"role": "tool", "tool_call_id": "call_1", "content": "line 0"},
            }
        ]
    }
    header, row = _messages(body).splitlines()
    assert row.split()[:4] == ["2", "tool", "504", "truncated,evicted"]


def test_a_row_folded_into_the_summary_is_flagged_summarised() -> None:
    body = {
        "data": [
            {
                "pos": 3,
                "role": "tool",
                "tokens": 40,
                "summarised": True,
                "evicted": False,
                "message": {"role": "tool", "tool_call_id": "call_2", "content": "[context-"},
            }
        ]
    }
    header, row = _messages(body).splitlines()
    assert row.split()[:4] == ["3", "tool", "40", "summarised"]
