"""``read_form``: a text as the fact check reads a fact, lines kept (every format character
dropped, compatibility forms plain), as a per-character test of the category would make it."""

from __future__ import annotations

import sys
import unicodedata

from proxy.cascade.memory import read_form


def test_every_format_character_is_dropped_and_the_rest_normalised() -> None:
    every = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    text = "ｐａｓｓ" + "x".join(every) + "ﬁle\n2²"
    expected = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    assert read_form(text) == unicodedata.normalize("NFKC", expected)
    assert read_form("plain\ttext\n") == "plain\ttext\n"
