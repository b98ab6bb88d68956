"""``cascade.paging``: pages and grep hits of a stored raw output."""

from __future__ import annotations

import random
import re
import string
import time
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from proxy.cascade.paging import raw_output_page


def _page(text: str, **how: Any) -> str:
    """``raw_output_page``'s page alone, what ``read_tool_output`` answers."""
    page, _ = raw_output_page(text, **how)
    return page


def _page_body(page: str) -> tuple[int, int, int, str]:
    header, _, rest = page.partition("\n")
    m = re.fullmatch(r"\[read_tool_output id=\S* chars (\d+)-(\d+) of (\d+)\]", header)
    assert m is not None, header
    a, b, n = (int(g) for g in m.groups())
    return a, b, n, rest[: b - a]


def test_page_returns_slice_with_header() -> None:
    text = "0123456789" * 10
    page = _page(text, id="c1", offset=5, limit=10, max_chars=1000)
    assert page.startswith("[read_tool_output id=c1 chars 5-15 of 100]\n5678901234\n")
    assert '"offset": 15' in page  # note naming the next offset


def test_last_page_has_no_next_note() -> None:
    page = _page("abc", id="c1", max_chars=1000)
    assert page == "[read_tool_output id=c1 chars 0-3 of 3]\nabc"


def test_page_is_capped_including_header() -> None:
    text = "x" * 10_000
    page = _page(text, id="c1", offset=0, limit=5000, max_chars=500)
    assert len(page) <= 500
    a, b, _, body = _page_body(page)
    assert a == 0 and body == text[a:b] and b < 5000
    assert f'"offset": {b}' in page


def test_offset_past_end_is_empty_page() -> None:
    page = _page("abc", id="c1", offset=99, max_chars=1000)
    assert _page_body(page) == (3, 3, 3, "")


@given(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=3000),
    st.integers(min_value=200, max_value=700),
    st.one_of(st.none(), st.integers(min_value=1, max_value=900)),
)
@settings(max_examples=80, deadline=None)
def test_paging_by_offset_reproduces_text_exactly(
    text: str, max_chars: int, limit: int | None
) -> None:
    offset, pieces = 0, []
    while True:
        page = _page(text, id="c1", offset=offset, limit=limit, max_chars=max_chars)
        assert len(page) <= max_chars
        a, b, n, body = _page_body(page)
        assert (a, n) == (offset, len(text))
        pieces.append(body)
        if b >= n:
            break
        assert b > a
        offset = b
    assert "".join(pieces) == text


def test_grep_lists_matching_lines_with_offsets() -> None:
    text = "alpha\nbeta needle\ngamma\nneedle delta\n"
    page = _page(text, id="c1", grep="needle", max_chars=1000)
    lines = page.splitlines()
    assert "2 matching lines" in lines[0]
    assert lines[1:] == ["6: beta needle", "24: needle delta"]
    assert text[6:].startswith("beta needle") and text[24:].startswith("needle delta")


def test_grep_is_literal_in_any_case_with_alternatives() -> None:
    text = "a1\nB2\n(x\nd.\n"
    hits = _page(text, grep="b2|(X", max_chars=1000).splitlines()[1:]
    assert hits == ["3: B2", "6: (x"]
    assert _page(text, grep=".", max_chars=1000).splitlines()[1:] == ["9: d."]
    assert _page(text, grep="|", max_chars=1000).startswith("[read_tool_output")


def test_grep_takes_linear_time_whatever_the_pattern() -> None:
    # as a regex, (a*)*b backtracks exponentially: 2**40 steps on this one line
    text = "a" * 40 + "\n" + "(a*)*b here\n"
    assert _page(text, grep="(a*)*b", max_chars=1000).splitlines()[1:] == ["41: (a*)*b here"]


def test_grep_time_does_not_grow_with_the_alternatives() -> None:
    # A regex of 300 escaped alternatives took 2 s on this 1 MB (18 s for 1,000 on 2 MB),
    # on the event loop every tenant shares; one automaton takes milliseconds.
    rng = random.Random(1)
    text = (
        "\n".join(
            "".join(rng.choice("abcdefghij klmnop") for _ in range(60)) for _ in range(16_000)
        )
        + "\nthe Needle line\n"
    )
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(300)]
    # The best of three runs: a loaded machine's preemption lengthens a run, never shortens
    # one, and the regex took seconds every time.
    took = []
    for _ in range(3):
        started = time.perf_counter()
        page = _page(text, grep="|".join([*words, "NEEDLE"]), max_chars=10_000)
        took.append(time.perf_counter() - started)
    assert min(took) < 1.0, took
    assert page.splitlines()[-1] == f"{len(text) - 16}: the Needle line"


def test_grep_output_is_capped() -> None:
    text = "hit line\n" * 5000
    page = _page(text, id="c1", grep="hit", max_chars=1000)
    assert len(page) <= 1000
    assert "5000 matching lines" in page
    assert "more matching lines not shown" in page


def test_grep_pages_by_the_offset_its_note_names_without_skipping_or_repeating() -> None:
    # the note said only "page with offset/limit"; the offset just past the last line shown
    # starts inside that line, whose rest is listed again when it still matches
    text = "".join(f"hit {i} of the log\n" for i in range(500))
    seen: list[str] = []
    offset = 0
    for _ in range(50):
        page = _page(text, id="c1", grep="hit", offset=offset, max_chars=1000)
        assert len(page) <= 1000
        seen += [row.split(": ", 1)[1] for row in page.splitlines()[1:] if ": hit " in row]
        named = re.search(r"offset (\d+)", page.splitlines()[-1])
        if named is None:
            break
        offset = int(named[1])
    assert seen == [f"hit {i} of the log" for i in range(500)]


def test_grep_with_no_room_for_a_whole_hit_still_shows_one_and_moves_on() -> None:
    # a page whose room (the window's, or a small maxChars) was less than its first matching
    # row listed none and named that row's own offset: the caller was sent back to it forever
    short = "".join(f"hit {i} of the log\n" for i in range(50))
    long = "z" * 1000 + " hit " + "z" * 1000 + "\nhit again\n"
    for text, max_chars in ((short, 300), (short, 320), (long, 420), (long, 600)):
        page = _page(text, id="c1", grep="hit", max_chars=max_chars)
        first = page.splitlines()[1]
        at, shown = first.split(": ", 1)
        assert "hit" in shown, (max_chars, page)
        assert shown.strip("…") == text[int(at) : int(at) + len(shown.strip("…"))]
        named = re.search(r"offset (\d+)", page.splitlines()[-1])
        assert named is not None and int(named[1]) > text.index("hit"), page
        assert max_chars < 400 or len(page) <= max_chars, page


def test_grep_with_a_long_pattern_stays_within_the_cap() -> None:
    # the header quoted the whole pattern: a 30,000-character grep gave a page past the cap
    page = _page("hit\n" * 10, id="c1", grep="x" * 30_000 + "|hit", max_chars=1000)
    assert len(page) <= 1000
    assert "10 matching lines" in page


@pytest.mark.timeout(5)
def test_a_grep_of_one_very_long_alternative_does_not_stall_the_loop() -> None:
    # a DFA over one 100,000-character alternative took tens of seconds to build, in the
    # event loop every tenant shares; the bound leaves the linear build a thousandfold room
    page = _page("a hit\n" * 3, id="c1", grep="q" * 100_000 + "|HIT", max_chars=1000)
    assert "3 matching lines" in page


def test_grep_long_line_shows_window_at_absolute_offset() -> None:
    text = "z" * 10_000 + "NEEDLE" + "z" * 10_000
    page = _page(text, grep="NEEDLE", max_chars=2000)
    row = page.splitlines()[1]
    start = int(row.split(":", 1)[0])
    assert len(row) < 500 and "NEEDLE" in row
    assert row.split(": ", 1)[1].strip("…") == text[start : start + len(row.split(": ", 1)[1]) - 2]


def test_the_next_offset_is_where_the_page_or_its_note_says_the_next_starts() -> None:
    text = "".join(f"line {i:03d} hit\n" for i in range(300))
    page, after = raw_output_page(text, id="c", offset=10, limit=50, max_chars=1000)
    assert after == 60 and page.endswith(
        '[... more: read_tool_output({"id": "c", "offset": 60}) ...]'
    )
    assert raw_output_page(text, id="c", offset=len(text) - 5, max_chars=1000)[1] is None
    page, after = raw_output_page(text, id="c", grep="hit", max_chars=500)  # hits not shown
    assert after is not None and f"call again with offset {after} ...]" in page
    assert raw_output_page(text, id="c", grep="line 299", max_chars=500)[1] is None
    assert raw_output_page(text, id="c", grep="line 001", limit=100, max_chars=500)[1] == 100
