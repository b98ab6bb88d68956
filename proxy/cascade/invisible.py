"""The characters no reader sees, and the one rule that drops them.

A renderer shows nothing for a format character (a zero-width space, a soft hyphen, a bidi
control, a tag), for the other default-ignorable code points (a variation selector, the
grapheme joiner, a Hangul filler), for a control character that is not whitespace, or for a
lone surrogate; a model reads a word split by one as the word. So a text a check reads must
be read without them, or ``pass\\u200bword`` and ``ign\\u034fore`` slip past a pattern. Some
of them spell, though: the zero-width joiner and non-joiner (:data:`JOINERS`) a Persian or
Indic word or an emoji sequence, a variation selector an emoji's or ideograph's form
(:data:`MARKS`); text kept for people keeps those, and the checks read it without them
(``cascade.memory``: a stored fact keeps both, its key the marks).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from itertools import groupby

__all__ = ["JOINERS", "MARKS", "visible"]

JOINERS = "\u200c\u200d"
"""The zero-width non-joiner and joiner."""


def visible(text: str, *, joiners: bool = False, marks: bool = False) -> str:
    """``text`` without what no reader sees: format characters (``Cf``: zero-width spaces,
    soft hyphens, bidi controls, tags), :data:`MARKS`, controls but whitespace (``Cc``) and
    lone surrogates (``Cs``, which no store encodes); the :data:`JOINERS` kept with
    ``joiners``, the :data:`MARKS` with ``marks``."""
    if text.isascii():  # only controls can hide there, which a table drops faster
        return text.translate(_ASCII_INVISIBLE)
    return _invisible(joiners, marks).sub("", text)


MARKS = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180d\u180f\u2065\u3164\ufe00-\ufe0f\uffa0"
    "\ufff0-\ufff8\U000e0000\U000e0002-\U000e001f\U000e0080-\U000e0fff]"
)
"""Unicode's ``Default_Ignorable_Code_Point`` less ``Cf``: variation selectors (an emoji's or
an ideograph's form), the grapheme joiner, Hangul fillers, reserved code points."""


@functools.cache
def _invisible(joiners: bool, marks: bool) -> re.Pattern[str]:
    """What :func:`visible` drops as a class of ranges (all in planes 0, 1 and 14), which
    ``re`` scans a long text for many times faster than a test of each one's category."""
    found = (c for c in _dropped() if _is_invisible(chr(c), joiners=joiners, marks=marks))
    runs = ([c for _, c in run] for _, run in groupby(enumerate(found), lambda p: p[1] - p[0]))
    return re.compile("[" + "".join(f"\\U{r[0]:08x}-\\U{r[-1]:08x}" for r in runs) + "]+")


@functools.cache
def _dropped() -> tuple[int, ...]:
    """Every code point :func:`visible` drops keeping nothing: one scan of the planes, which
    each pattern's fewer are picked from."""
    return tuple(c for c in (*range(0x20000), *range(0xE0000, 0xE1000)) if _is_invisible(chr(c)))


def _is_invisible(ch: str, *, joiners: bool = False, marks: bool = False) -> bool:
    if MARKS.match(ch):
        return not marks
    category = unicodedata.category(ch)
    if category == "Cf":
        return not (joiners and ch in JOINERS)
    return category == "Cs" or (category == "Cc" and not ch.isspace())


_ASCII_INVISIBLE = dict.fromkeys(c for c in range(0x80) if _is_invisible(chr(c)))
