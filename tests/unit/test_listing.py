"""``proxy.listing``: a list's page and its ``has_more`` from one row read past it."""

from __future__ import annotations

from proxy.listing import page_of, rows_to_read


def test_one_row_more_is_read_and_cut_off_again() -> None:
    assert rows_to_read(2) == 3
    assert page_of([1, 2, 3], 2) == ([1, 2], True)
    assert page_of([1, 2], 2) == ([1, 2], False)
    assert page_of([], 2) == ([], False)


def test_no_limit_reads_every_row_and_has_no_more() -> None:
    assert rows_to_read(None) is None
    assert page_of((1, 2, 3), None) == ([1, 2, 3], False)
