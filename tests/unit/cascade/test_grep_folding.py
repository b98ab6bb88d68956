"""A grep's hit positions are the text's own: a line is matched lowercased, and ``İ``
(U+0130) lowercases to two characters, so on a long line holding some before the hit the
snippet was cut around a place past the hit, missing it, and named an offset that was not
the hit's."""

from __future__ import annotations

import sys

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
