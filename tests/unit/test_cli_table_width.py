"""``cascade-proxy`` tables line up on a terminal whatever the script of what they hold: a
column's width is counted in terminal cells, two for a CJK character, none for a combining
accent, not in characters."""

from __future__ import annotations

import unicodedata

from proxy.cli_api import table


def _cells(text: str) -> int:
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


def test_wide_and_combining_characters_keep_the_columns_aligned() -> None:
    rows = [("模型-é", "x", 1), ("gpt-4o", "y", 22), ("cafe\u0301", "z", 333)]
    lines = table(("MODEL", "AGENT", "N"), rows).splitlines()
    starts = {_cells(line[: line.index(agent)]) for line, agent in zip(lines, "Axyz", strict=True)}
    ends = {_cells(line) for line in lines}
    assert len(starts) == 1, lines  # the AGENT column starts at one terminal cell
    assert len(ends) == 1, lines  # and the right-aligned numbers end at one
