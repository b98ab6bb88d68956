"""``fact_key`` keeps the key of every fact stored before ``cascade.invisible``: the stored
keys are compared with new ones and rewritten only by a migration that clears them (0033,
which dropped closing full stops), so a stored text whose key moved otherwise would let its
duplicate in. The keys are checked against the implementation they were made with, copied
here as it was, with 0033's one change (a stored fact is what its ``_clean`` gave)."""

from __future__ import annotations

import random
import re
import sys
import unicodedata

from hypothesis import given, settings, strategies as st

from proxy.cascade.invisible import JOINERS, MARKS
from proxy.cascade.memory import fact_key, sanitize_fact

_SPACE = re.compile(r"\s+")


def _old_clean(text: str) -> str:
    chars = (" " if ch in "\n\r\t" else ch for ch in text)
    kept = "".join(
        ch for ch in chars if ch in JOINERS or unicodedata.category(ch) not in ("Cc", "Cf", "Cs")
    )
    return unicodedata.normalize("NFC", _SPACE.sub(" ", kept).strip())


def _old_key(text: str) -> str:
    unjoined = text.replace("\u200c", "").replace("\u200d", "")
    key = _SPACE.sub(" ", unicodedata.normalize("NFKC", unjoined)).strip().casefold()
    return key.rstrip(" .\u3002") or key  # closing full stops: keys made again by 0033


_WHITE_CONTROLS = {
    c: " " for c in range(0x100) if unicodedata.category(chr(c)) == "Cc" and chr(c).isspace()
}
"""The controls the old clean dropped and the new one reads as a space (``\\x0b``, NEL)."""

_MARKS = [chr(c) for c in range(sys.maxunicode + 1) if MARKS.match(chr(c))]
_ALPHABET = (
    [chr(c) for c in range(0x100)]  # controls, whitespace, Latin-1 with its compatibility forms
    + [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    + ["\ud800", "\udfff", "\u2028", "\u3000", "\u00a0"]
    + _MARKS
    + list("ｐａｓｓﬁ²ǅ\u0301\u0338ß\u0130\u1100\u1161가\u845b👨💻\u26a0İﬀ")
)


def _old_stored_key_holds(raw: str) -> None:
    stored = _old_clean(raw)
    assert fact_key(stored) == _old_key(stored), repr(stored)
    assert fact_key(raw) == _old_key(_old_clean(raw.translate(_WHITE_CONTROLS))), repr(raw)


@settings(max_examples=200, deadline=None)
@given(st.text(st.sampled_from(_ALPHABET), max_size=40))
def test_a_stored_fact_keeps_the_key_it_was_stored_with(raw: str) -> None:
    """Every text the old clean could store keys as it did; a raw text keys as the old key
    but for the whitespace controls, which now part words as a space (README)."""
    _old_stored_key_holds(raw)


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(exclude_categories=()), max_size=30))
def test_any_text_keeps_its_key(raw: str) -> None:
    _old_stored_key_holds(raw)


def test_a_seeded_corpus_keeps_its_keys() -> None:
    """A fixed corpus over the same alphabet, so a run without hypothesis's database
    checks the same texts every time."""
    rng = random.Random(63)
    for _ in range(3000):
        _old_stored_key_holds("".join(rng.choices(_ALPHABET, k=rng.randrange(1, 24))))


def test_a_stored_fact_is_stored_as_it_was() -> None:
    """A stored text is a fixed point of the clean: checking it again keeps it whole."""
    rng = random.Random(64)
    for _ in range(2000):
        stored = _old_clean("".join(rng.choices(_ALPHABET, k=rng.randrange(1, 24))))
        verdict = sanitize_fact(stored, patterns=[])
        assert verdict.text in (stored, None), repr(stored)
