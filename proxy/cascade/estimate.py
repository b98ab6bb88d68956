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

__all__ = ["DENSE_CHARS_PER_TOKEN", "DENSE_SWITCHES", "text_tokens"]

DENSE_CHARS_PER_TOKEN = 1.4
DENSE_SWITCHES = 0.15
"""Changes between a letter and a digit per character that mark a random-looking id: hashes,
UUIDs and base64 have far more than words, paths and identifiers (CamelCase ones too)."""

_IDS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-"


def _class_table() -> bytes:
    """Each UTF-8 byte's class: ``L`` letter, ``D`` digit, ``O`` another id character
    (``+/=_-``), ``J`` JSON punctuation, lead bytes ``m`` (below U+3000), ``h`` (up to
    U+FFFF) and ``a`` (beyond); a space for the rest (2-byte leads and continuation bytes
    weigh no more than ASCII)."""
    table = bytearray(b" " * 256)
    for byte in _IDS:
        table[byte] = (
            ord("D") if chr(byte).isdigit() else ord("L") if chr(byte).isalpha() else ord("O")
        )
    for byte in b'"{}[]:':
        table[byte] = ord("J")
    table[0xE0:0xE3] = b"m" * 3
    table[0xE3:0xF0] = b"h" * 13
    table[0xF0:] = b"a" * 16
    return bytes(table)


_CLASSES = _class_table()
_IDS_ONLY = bytes.maketrans(b"Jmha", b"    ")
"""Turns the classes that end an id run into spaces, leaving ``L``, ``D``, ``O`` and spaces."""


def _dense_extra(classes: bytes) -> float:
    """What the random-looking id runs add over their per-character weights.

    A run is a maximal stretch of id characters; only one holding a letter-digit switch can
    be dense, so the runs are found from their switches (``LD``/``DL``), which most text has
    few of, with ``find`` rather than a scan of every position."""
    ids = classes.translate(_IDS_ONLY)
    extra = 0.0
    ld, dl = ids.find(b"LD"), ids.find(b"DL")
    while ld >= 0 or dl >= 0:
        at = ld if dl < 0 or 0 <= ld < dl else dl
        start = ids.rfind(b" ", 0, at) + 1
        end = ids.find(b" ", at)
        end = len(ids) if end < 0 else end
        n = end - start
        if n >= 16:
            run = ids[start:end]
            if run.count(b"LD") + run.count(b"DL") >= DENSE_SWITCHES * n:
                extra += n / DENSE_CHARS_PER_TOKEN - n / 4 - run.count(b"D") / 12
        if 0 <= ld < end:
            ld = ids.find(b"LD", end)
        if 0 <= dl < end:
            dl = ids.find(b"DL", end)
    return extra


def text_tokens(text: str) -> int:
    """The estimated tokens of ``text`` (module docstring): ``ceil(len / 4)`` for ASCII prose
    and code, more for dense text. One translation of its UTF-8 bytes into classes gives
    every count."""
    if not text:
        return 0
    classes = text.encode("utf-8", "surrogatepass").translate(_CLASSES)
    digits = classes.count(b"D")
    total = len(text) / 4 + digits / 12 + classes.count(b"J") / 4
    if not text.isascii():
        total += classes.count(b"m") / 4 + classes.count(b"h") * 0.45
        total += classes.count(b"a") * 7 / 4
    if digits and (classes.count(b"LD") or classes.count(b"DL")):  # a switch needs a digit
        total += _dense_extra(classes)
    return math.ceil(total)
