"""``sessions show`` prints the view README says it does: its fields with the window's split
(``usage``) and ``calibration``, which the session's view answers and the console's usage panel
shows, beside ``reclaimed`` by stage."""

from __future__ import annotations

from proxy.cli_sessions import _show

VIEW = {
    "id": "run-1",
    "object": "session",
    "agent": "default",
    "model": "gpt-4o",
    "occupancy": 40,
    "calibration": 1.25,
    "usage": {"system": 1, "summary": 2, "messages": 30, "tool_results": 7},
    "reclaimed": {"eviction": 0, "truncation": 5, "summarisation": 0},
    "summary": None,
}


def test_show_prints_the_windows_split_and_its_calibration() -> None:
    lines = _show(VIEW).splitlines()
    assert "usage             system 1, summary 2, messages 30, tool_results 7" in lines
    assert "calibration       1.25" in lines
    assert "reclaimed         eviction 0, truncation 5, summarisation 0" in lines


def test_a_view_without_the_split_shows_a_dash() -> None:
    shown = _show({"id": "run-1"}).splitlines()
    assert [line.split()[1] for line in shown if line.split()[0] in ("usage", "reclaimed")] == [
        "-",
        "-",
    ]
