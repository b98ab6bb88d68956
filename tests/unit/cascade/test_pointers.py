"""``cascade.pointers``: runs of lines an earlier tool result holds, found and pointed to."""

from __future__ import annotations

import pytest

from proxy.cascade import pointers
from proxy.cascade.pointers import MAX_OCCURRENCES, EarlierLines, lines_of, point_to_earlier


def test_pointer_names_earlier_result_and_one_based_range() -> None:
    block = [f"line {i} of a long and recognisable build log output" for i in range(10)]
    earlier = EarlierLines.build([("call_old", "\n".join(["head", *block, "tail"]))])
    out, pointed = point_to_earlier(["new", *block[2:8], "end"], earlier)
    assert out == ["new", "[6 lines: same as lines 4-9 of tool result call_old]", "end"]
    assert pointed == 6


def test_pointer_skips_short_matches() -> None:
    earlier = EarlierLines.build([("c0", "ok\nok2\nok3\n")])
    out, pointed = point_to_earlier(["ok", "ok2", "ok3"], earlier)
    assert (out, pointed) == (["ok", "ok2", "ok3"], 0)


def test_pointer_takes_the_longest_earlier_run_not_the_first_place_a_line_occurs() -> None:
    block = [f"    value_{i} = compute({i}, 'a recognisable argument')" for i in range(10)]
    earlier = EarlierLines.build(
        [("call_grep", f"x.py:1:{block[0]}\n{block[0]}\nother"), ("call_cat", "\n".join(block))]
    )
    out, pointed = point_to_earlier(["head", *block], earlier)
    assert (
        out == ["head", "[10 lines: same as lines 1-10 of tool result call_cat]"] and pointed == 10
    )


def test_places_are_the_latest_places_of_a_line_latest_first() -> None:
    results = [(f"c{i}", "same line\nonly in " + str(i)) for i in range(MAX_OCCURRENCES + 3)]
    places = EarlierLines.build(results).places(["same line"])["same line"]
    assert places == [(k, 0) for k in range(MAX_OCCURRENCES + 2, 2, -1)]


def test_a_tie_between_runs_goes_to_the_latest_place() -> None:
    block = [f"    value_{i} = compute({i}, 'a recognisable argument')" for i in range(4)]
    text = "\n".join(block)
    earlier = EarlierLines.build([("c_old", text), ("c_new", f"{text}\nfirst\n{text}")])
    out, _ = point_to_earlier(block, earlier)
    assert out == ["[4 lines: same as lines 6-9 of tool result c_new]"]


def _places_by_scan(earlier: EarlierLines) -> dict[str, list[tuple[int, int]]]:
    """The per-line index ``places`` stands in for: every non-blank earlier line's places,
    the latest ``MAX_OCCURRENCES`` kept, latest first."""
    where: dict[str, list[tuple[int, int]]] = {}
    for k, split in enumerate(earlier.lines):
        for j, line in enumerate(split):
            if line.strip():
                where.setdefault(line, []).append((k, j))
    return {line: places[::-1][:MAX_OCCURRENCES] for line, places in where.items()}


@pytest.mark.parametrize("copies", [1, 4])
@pytest.mark.parametrize("shared", [1, 3, 8, 9, 40])
def test_places_are_what_indexing_every_earlier_line_gives(shared: int, copies: int) -> None:
    """``EarlierLines.places`` looks up only the wanted lines, by linear searches for a few
    and by one pass for many, and stops a line at ``MAX_OCCURRENCES`` places; either way it
    answers what indexing every earlier line would (some lines here occur more often than
    that, some less)."""
    rows = [f"row {j % shared}" for j in range(2 * shared + 3)]
    earlier = EarlierLines.build(
        [
            ("c0", "\n".join(["   ", "x", *rows[:shared], "x"])),
            ("c1", "\n".join(["", *reversed(rows), "y", "x"])),
            *((f"c2_{n}", "\n".join(rows + ["z"])) for n in range(copies)),
            ("c3", "\n".join([*dict.fromkeys(rows), "y"])),  # no line twice
        ]
    )
    wanted = [*rows, "x", "y", "z", "   ", "", "absent"]
    scan = _places_by_scan(earlier)
    places = earlier.places(wanted)
    assert places == {line: scan[line] for line in wanted if line in scan}
    assert "absent" not in places and "   " not in places


def test_lines_are_memoised_for_texts_up_to_the_bound_only() -> None:
    """An earlier result's lines are split once across requests; a long text is split each
    time, so the memo's memory stays bounded."""
    short = "alpha\nbeta\r\ngamma unique to this test\n"
    long = "x" * (pointers._MEMO_CHARS + 1) + "\ny"
    before = pointers._memo_split.cache_info()
    assert lines_of(short) == tuple(short.splitlines()) == lines_of(short)
    assert lines_of(long) == tuple(long.splitlines())
    after = pointers._memo_split.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 1)
