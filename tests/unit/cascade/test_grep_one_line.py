"""A grep of one long line (minified JSON, a log with no newlines) holds memory in the
line's length, not in its count of hits: the matcher wants a line's first hit, and asking
the automaton for every hit built a tuple per hit, a gigabyte and seconds of the event
loop for a one-line output of a few MiB whose text the pattern matches everywhere."""

from __future__ import annotations

import tracemalloc

from proxy.cascade.paging import grep_matcher, raw_output_page


def test_a_grep_hitting_everywhere_on_one_line_holds_memory_in_the_line() -> None:
    text = "a" * (256 << 10)
    tracemalloc.start()
    try:
        page, next_at = raw_output_page(text, id="x", grep="a", max_chars=8000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "1 matching lines" in page and next_at is None
    assert peak < 8 * len(text), peak


def test_the_first_hit_is_found_wherever_the_line_puts_it() -> None:
    for pattern in ("Needle", "need|needle|eedleX", "x" * 5000 + "NEEDLE"):
        match = grep_matcher(pattern)
        alternatives = [p.lower() for p in pattern.split("|")]
        for at in (0, 1, 4090, 4095, 4096, 4100, 8191, 12_000, 70_000):
            line = "y" * at + "x" * 5000 + "needleX" + "y" * 3
            low = line.lower()
            start = min(i for i in (low.find(p) for p in alternatives) if i >= 0)
            end = start + max(len(p) for p in alternatives if low.startswith(p, start))
            assert match(line) == (start, end), (pattern[:20], at)
        assert match("y" * 20_000) is None
