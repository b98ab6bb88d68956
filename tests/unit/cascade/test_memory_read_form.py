"""``read_form``: a text as the fact check reads a fact, lines kept (every character no
reader sees dropped, compatibility forms plain), as a per-character test of the category
would make it, and what ``fact_key`` makes of the same text once its whitespace collapses."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from proxy.cascade.memory import fact_key, read_form

INVISIBLE = [
    chr(c)
    for c in range(sys.maxunicode + 1)
    if unicodedata.category(chr(c)) in ("Cf", "Cs")
    or (unicodedata.category(chr(c)) == "Cc" and not chr(c).isspace())
]


def test_every_invisible_character_is_dropped_and_the_rest_normalised() -> None:
    """Format characters, lone surrogates and the controls that are not whitespace go;
    a tab, a line break and the other whitespace controls stay."""
    text = "ｐａｓｓ" + "x".join(INVISIBLE) + "ﬁle\n2²\x0b\x1c\x85"
    gone = set(INVISIBLE)
    expected = "".join(ch for ch in text if ch not in gone)
    assert read_form(text) == unicodedata.normalize("NFKC", expected)
    assert read_form("plain\ttext\n") == "plain\ttext\n"
    ascii = "".join(map(chr, range(0x80)))
    assert read_form(ascii) == "".join(ch for ch in ascii if ch not in gone)


def test_the_extraction_reads_a_text_as_the_fact_check_does() -> None:
    """The extraction redacts a span in ``read_form`` so it is shown no secret the fact check
    would see through: the two must drop the same characters. The check dropped controls
    (``pass\\x00word``) and lone surrogates that ``read_form`` kept."""
    every_control = "".join(chr(c) for c in range(0x20)) + "\x7f\x85"
    for text in (
        "pass\x00word: hunter2",
        "pass\x1b[0mword\ud800 = x",
        f"The Ｂｕｉｌｄ\u200d uses\u200b uv{every_control}\u00a0ﬁle",
        "x".join(INVISIBLE) + "\u200c\u200d",
    ):
        assert " ".join(read_form(text).split()).casefold() == fact_key(text), repr(text)


def test_every_default_ignorable_character_is_dropped() -> None:
    """Unicode's ``Default_Ignorable_Code_Point`` is what a renderer shows nothing for: a
    variation selector, the grapheme joiner or a Hangul filler inside ``password`` hides it
    from no reader, so from no check either (a stored fact keeps the ones that pick a
    character's form, ``sanitize_fact``'s tests say)."""
    regex = pytest.importorskip("regex")  # tiktoken's dependency: Unicode's properties
    every = "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)
    ignorable = regex.findall(r"\p{Default_Ignorable_Code_Point}", every)
    assert read_form("pass" + "".join(ignorable) + "word") == "password"
