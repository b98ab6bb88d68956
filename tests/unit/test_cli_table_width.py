"""``cascade-proxy`` tables line up on a terminal whatever the script of what they hold: a
column's width is counted in terminal cells, two for a CJK character, none for a combining
accent, not in characters."""

from __future__ import annotations

import unicodedata

import pytest

from proxy.cli_text import table


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


@pytest.mark.parametrize(
    "name",
    [
        "👩\u200d💻",  # a ZWJ sequence: one glyph, two cells
        "👨\u200d👩\u200d👧",
        "☺\ufe0e✓",  # a variation selector takes no cell
        "ab\u200bcd",  # a zero-width space neither
        "\u0e01\u0e31x",  # a Thai vowel sign sits on its consonant (combining class 0)
        "\u0915\u094d\u200d\u0937",  # a Devanagari half form: the ZWJ joins no emoji
    ],
)
def test_joiners_and_zero_width_characters_take_no_cell(name: str) -> None:
    """The cells a terminal gives each: a ZWJ, a variation selector or a zero-width space
    counted as one pushed the next columns right."""
    lines = table(("NAME", "X"), [(name, "x"), ("abcd", "y")]).splitlines()
    assert lines[2] == "abcd  y"
    wide = {"👩\u200d💻": 2, "👨\u200d👩\u200d👧": 2, "☺\ufe0e✓": 2, "ab\u200bcd": 4}
    assert lines[1] == name + " " * (4 - wide.get(name, 2)) + "  x", lines


def test_a_long_value_is_cut_to_the_columns_cells_not_its_characters() -> None:
    """A column is cut at 72 cells: cut at 72 characters, a CJK title took 144, wider than
    the terminal, and a cut inside a ZWJ sequence left its joiner dangling."""
    lines = table(("TITLE", "X"), [("模" * 100, "x"), ("👩\u200d💻" * 40, "y")]).splitlines()
    first, second = (line.rsplit("  ", 1)[0].rstrip() for line in lines[1:])
    assert _cells(first) <= 72 and first.endswith("…"), first
    assert first.count("模") == 35
    assert not second.removesuffix("…").endswith("\u200d"), second
    assert second.count("👩\u200d💻") == 35


@pytest.mark.parametrize(
    ("name", "cells"),
    [
        ("\u2764\ufe0f", 2),  # VS16: a text symbol drawn as an emoji, two cells
        ("1\ufe0f\u20e3", 2),  # a keycap
        ("\U0001f3f3\ufe0f\u200d\U0001f308", 2),  # a rainbow flag
        ("\U0001f468\u200d\u2695\ufe0f", 2),  # a profession: a symbol joined to the person
        ("\U0001f469\u200d\u2764\ufe0f\u200d\U0001f468", 2),  # a couple with a heart
        ("\U0001f44d\U0001f3fd", 2),  # a skin tone on the emoji before it
        (unicodedata.normalize("NFD", "한국어"), 6),  # decomposed Hangul (macOS file names)
        ("a\u00adb", 3),  # a soft hyphen is drawn
        # two emoji, each with its skin tone, joined (a handshake): one glyph, not two
        ("\U0001faf1\U0001f3fb\u200d\U0001faf2\U0001f3ff", 2),
        ("\u4dc0", 2),  # a Yijing hexagram: wide since Unicode 16, beyond Python 3.11's tables
        ("\U0001f1e6", 2),  # a regional indicator alone, drawn as an emoji
        ("\u0600x", 2),  # a prepended concatenation mark (Arabic number sign) is drawn
    ],
)
def test_emoji_presentation_and_conjoining_jamo_take_the_cells_a_terminal_gives(
    name: str, cells: int
) -> None:
    """As wcwidth counts them: a VS16 widens the symbol before it, a skin tone and a symbol
    a ZWJ ties to an emoji draw inside it, and a Hangul syllable's vowel and final
    consonant jamo draw inside its leading one. Rules written by hand for each of these
    missed the cases they did not name (a handshake of two skin-toned hands took four
    cells) and Unicode's newer wide characters (Python's tables are its release's)."""
    lines = table(("NAME", "X"), [(name, "x"), ("a" * 12, "y")]).splitlines()
    assert lines[1] == name + " " * (12 - cells) + "  x", lines  # padded to the widest


def test_an_ascii_listing_is_measured_without_a_look_up_per_character(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A page of thousands of ASCII rows is measured by its length: a Unicode look-up per
    character, three times a cell, held a long listing for seconds. ASCII takes one cell a
    character either way, its controls escaped first."""
    from proxy import cli_text

    every_ascii = cli_text.printable("".join(map(chr, range(128))))  # as a cell holds it
    assert sum(n for _, n in cli_text._widths(every_ascii)) == len(every_ascii)
    rows = [(f"sess-{i}", "default", "gpt-4o-mini", i, "2026-12-06") for i in range(10_000)]
    monkeypatch.setattr(cli_text, "_widths", None)  # called, it raises TypeError
    lines = table(("ID", "AGENT", "MODEL", "N", "UPDATED"), rows).splitlines()
    assert lines[-1] == "sess-9999  default  gpt-4o-mini  9999  2026-12-06"


def test_a_character_wcwidth_cannot_measure_takes_one_cell() -> None:
    """wcwidth gives a control character -1, which padded a column by one cell too few a
    character (and a whole string of them to -1): a cell's controls are escapes already
    (``printable``), a header's are counted one cell each."""
    lines = table(("é\x7f", "X"), [("abcd", "y")]).splitlines()
    assert lines == ["é\x7f" + "  " + "  X", "abcd  y"]
