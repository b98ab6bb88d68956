"""A grep's hit positions are the text's own: a line is matched lowercased, and ``İ``
(U+0130) lowercases to two characters, so on a long line holding some before the hit the
snippet was cut around a place past the hit, missing it, and named an offset that was not
the hit's."""

from __future__ import annotations

import random
import sys

import ahocorasick_rs
import pytest

from proxy.cascade import paging
from proxy.cascade.paging import grep_matcher, raw_output_page


def test_a_long_line_with_dotted_capital_is_shown_around_its_hit() -> None:
    text = "\u0130" * 500 + "needle" + "x" * 500 + "\n"
    page, _ = raw_output_page(text, id="c", grep="NEEDLE", max_chars=4000)
    row = page.splitlines()[1]
    at, snippet = row.split(": ", 1)
    assert "needle" in snippet, page
    assert text[int(at) :].startswith(snippet.strip("…")), page


def test_the_dotted_capital_still_matches_either_way() -> None:
    assert grep_matcher("\u0130stanbul")("x \u0130STANBUL") == (2, 10)
    assert grep_matcher("istanbul")("\u0130stanbul") == (0, 8)
    assert grep_matcher("\u0130")("ai") == (1, 2)


def test_only_the_dotted_capital_lowercases_to_more_than_one_character() -> None:
    """The fold maps it alone; a Unicode table giving another would shift positions again."""
    longer = [c for c in range(sys.maxunicode + 1) if len(chr(c).lower()) != 1]
    assert longer == [0x130]


def test_windows_of_any_width_find_the_hit_the_whole_line_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Windows narrower than the needles, hits across their edges, overlapping and longest
    alternatives, folded characters: the first hit is the unwindowed automaton's."""
    rng = random.Random(48)
    letters = "abAB\u0130\u0131"
    for _ in range(3000):
        monkeypatch.setattr(paging, "_GREP_WINDOW", rng.randint(1, 6))
        pattern = "|".join(
            "".join(rng.choice(letters) for _ in range(rng.randint(1, 7)))
            for _ in range(rng.randint(1, 3))
        )
        line = "".join(rng.choice(letters) for _ in range(rng.randint(0, 40)))
        whole = ahocorasick_rs.AhoCorasick(
            sorted({paging._fold(p) for p in pattern.split("|")}),
            matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_LONGEST,
        ).find_matches_as_indexes(paging._fold(line))
        expected = (whole[0][1], whole[0][2]) if whole else None
        assert grep_matcher(pattern)(line) == expected, (pattern, line)
