"""The token estimate of a text when no BPE encoder is loaded (offline, ``CASCADE_TOKENIZER=``).

Plain characters/4 fits English prose and code, but text a BPE splits finely comes out far
too low: CJK, emoji and other scripts of several UTF-8 bytes a character (often a token or
more each), hashes, UUIDs, base64 and random ids (a token per one or two characters), digit
runs (a token per three digits) and JSON, whose quotes and brackets are tokens of their own. A
session's real/estimated ratio corrects the average only after its first answer, and is
capped: a first prompt or a new block of such text would go out over the limit. Those
characters are therefore weighed by their class, so the estimate of such text is near or
above the real count, while ASCII prose and code count about as before:

- ASCII: 1/4; digits 1/3; JSON punctuation (``"{}[]:``) 1/2;
- 2-byte characters (Latin with accents, Greek, Cyrillic, Hebrew, Arabic): 1/4;
- 3-byte characters below U+3000 (Indic scripts, Thai, typographic punctuation): 1/2;
  from U+3000 (CJK, kana, Hangul, full-width forms): 0.7, near a BPE's count of common text
  (an overcount would calibrate the session's ratio under 1, and the guard would then count
  a later block of prose low);
- 4-byte characters (emoji, rare CJK): 2;
- a run of 16 or more id characters (letters, digits, ``+/=_-``) whose letters and digits
  alternate often (at least :data:`DENSE_SWITCHES` changes per character): 1 per
  :data:`DENSE_CHARS_PER_TOKEN` characters.
"""

from __future__ import annotations

import math
import re

__all__ = ["DENSE_CHARS_PER_TOKEN", "DENSE_SWITCHES", "text_tokens"]

DENSE_CHARS_PER_TOKEN = 1.4
DENSE_SWITCHES = 0.15
"""Changes between a letter and a digit per character that mark a random-looking id: hashes,
UUIDs and base64 have far more than words, paths and identifiers (CamelCase ones too)."""

_DIGITS = "0123456789"
_JSON_PUNCT = '"{}[]:'
_RUN = re.compile(r"[A-Za-z0-9+/=_\-]{16,}")
_SWITCH = re.compile(r"(?=[A-Za-z][0-9]|[0-9][A-Za-z])")


def _lead_classes() -> bytes:
    table = bytearray(256)
    table[0xE0:0xE3] = b"m" * 3
    table[0xE3:0xF0] = b"h" * 13
    table[0xF0:] = b"a" * 16
    return bytes(table)


_LEADS = _lead_classes()
"""UTF-8 lead bytes by the character they start: ``m`` below U+3000, ``h`` up to U+FFFF,
``a`` beyond; 2-byte leads and continuation bytes weigh no more than ASCII."""


def _count(text: str, chars: str) -> int:
    return sum(text.count(c) for c in chars)


def _dense_extra(text: str) -> float:
    """What the random-looking id runs of ``text`` add over their per-character weights."""
    extra = 0.0
    for match in _RUN.finditer(text):
        run = match.group()
        switches = sum(1 for _ in _SWITCH.finditer(run))
        if switches >= DENSE_SWITCHES * len(run):
            extra += len(run) / DENSE_CHARS_PER_TOKEN - len(run) / 4 - _count(run, _DIGITS) / 12
    return extra


def text_tokens(text: str) -> int:
    """The estimated tokens of ``text`` (module docstring): ``ceil(len / 4)`` for ASCII prose
    and code, more for dense text."""
    if not text:
        return 0
    total = len(text) / 4
    total += _count(text, _DIGITS) / 12 + _count(text, _JSON_PUNCT) / 4
    if not text.isascii():
        leads = text.encode("utf-8", "surrogatepass").translate(_LEADS)
        total += leads.count(b"m") / 4 + leads.count(b"h") * 0.45 + leads.count(b"a") * 7 / 4
    total += _dense_extra(text)
    return math.ceil(total)
