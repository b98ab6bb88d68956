"""The text ``cascade-proxy sessions`` and ``memory`` write on a terminal: stored text with
its control characters as escapes (``printable``), one table cell of it (``cell``), and
tables whose columns are measured in the cells a terminal gives each character."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Sequence
from typing import Any

from proxy.logs import BIDI_CONTROLS

__all__ = ["cell", "printable", "table"]


# C0 but the tab and line break, DEL and C1, each as an escape: stored text (a tool result, a reply,
# a model name another client sent) printed raw would drive the operator's terminal (ESC
# and OSC sequences recolour, retitle, rewrite it).
_TERMINAL_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
del _TERMINAL_ESCAPES[0x09], _TERMINAL_ESCAPES[0x0A]
# The bidirectional controls reorder what follows them on the line, and the line and
# paragraph separators end a line where the table has none: each as a \u escape, as the
# logs write them.
_TERMINAL_ESCAPES.update({c: f"\\u{c:04x}" for c in (*BIDI_CONTROLS, 0x2028, 0x2029)})


def printable(text: str) -> str:
    """``text`` with every control character but the tab and line break, every
    bidirectional control, and the line and paragraph separators, as an escape."""
    return text.translate(_TERMINAL_ESCAPES)


def cell(value: Any, width: int = 0) -> str:
    """``value`` as one table cell: ``-`` for none, on one line, printable, cut to ``width``
    terminal cells (``…`` its last), never inside a character's marks or joined ones."""
    text = "-" if value is None or value == "" else str(value)
    text = printable(" ".join(text.split()))  # newlines and tabs would break the row
    if not width or _cells(text) <= width:
        return text
    kept, used = [], 0
    for c, n in _widths(text):  # whole characters, their marks and joined ones with them
        if used + n > width - 1:
            break
        kept.append(c)
        used += n
    return "".join(kept) + "…"


def _cells(text: str) -> int:
    """How many terminal cells ``text`` takes (``_widths``), so a column holding it lines up
    with the others. ASCII, its controls escaped (``printable``), takes one cell a character:
    a listing of thousands of rows is measured without a look-up per character."""
    if text.isascii():
        return len(text)
    return sum(n for _, n in _widths(text))


def _widths(text: str) -> Iterator[tuple[str, int]]:
    """Each character of ``text`` with the terminal cells it takes, as wcwidth counts them:
    two for a wide (CJK, emoji) one; none for a mark on the one before it (an accent, a Thai
    vowel sign), a format character (a zero-width space, a joiner), a variation selector, a
    skin tone on the emoji before it, a Hangul vowel or final consonant jamo (drawn inside
    the syllable's leading one), or an emoji or symbol a joiner (ZWJ) ties to the one before,
    which a terminal draws as one glyph; one more for the emoji variation selector (VS16)
    after a narrow symbol, which it draws as a wide emoji. A narrow letter after a joiner
    (a Devanagari half form's consonant) and a spacing mark (a Devanagari vowel sign) keep
    their cell, and a soft hyphen is drawn."""
    joined = False
    last, symbol = 0, False  # the cells of the character before, and whether it is no letter
    for c in text:
        wide, category = unicodedata.east_asian_width(c) in "WF", unicodedata.category(c)
        if c == "\ufe0f":
            n = 1 if last == 1 and symbol else 0
        else:
            n = 0 if _drawn_inside(c, category, wide, joined, last) else 2 if wide else 1
        yield c, n
        joined, last, symbol = c == "\u200d", n, category[0] not in "LM"


def _drawn_inside(c: str, category: str, wide: bool, joined: bool, last: int) -> bool:
    """Whether ``c`` takes no cell of its own (``_widths``): a mark, a format character, a
    selector, a jamo that is no leading one, a skin tone, or what a ZWJ ties to the one before."""
    return bool(
        (joined and (wide or category == "So"))
        or _ZERO_WIDTH.match(c)
        or (category in _MARKS and c != "\u00ad")
        or ("\U0001f3fb" <= c <= "\U0001f3ff" and last == 2)
    )


_MARKS = ("Mn", "Me", "Cf")  # marks on the character before, and format characters
# variation selectors (VS16 apart), and the Hangul jamo that draw inside a leading one
_ZERO_WIDTH = re.compile("[\ufe00-\ufe0e\U000e0100-\U000e01ef\u1160-\u11ff\ud7b0-\ud7ff]")


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns two spaces apart, numbers right-aligned, widths in terminal
    cells; the last column is never padded."""
    cells = [[cell(v, 72) for v in row] for row in rows]
    widths = [max([_cells(h)] + [_cells(r[i]) for r in cells]) for i, h in enumerate(header)]
    numeric = [
        all(isinstance(row[i], int | float) or row[i] is None for row in rows) and rows
        for i in range(len(header))
    ]

    def line(values: Sequence[str]) -> str:
        pads = [" " * (w - _cells(v)) for v, w in zip(values, widths, strict=True)]
        pairs = enumerate(zip(values, pads, strict=True))
        out = [pad + v if numeric[i] else v + pad for i, (v, pad) in pairs]
        return "  ".join(out).rstrip()

    return "\n".join([line(list(header)), *(line(r) for r in cells)])
