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
    """``text`` with every control character but the tab and line break, and every
    bidirectional control, as an escape."""
    return text.translate(_TERMINAL_ESCAPES)


def cell(value: Any, width: int = 0) -> str:
    """``value`` as one table cell: ``-`` for none, on one line, printable, cut to ``width``."""
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
    with the others."""
    return sum(n for _, n in _widths(text))


def _widths(text: str) -> Iterator[tuple[str, int]]:
    """Each character of ``text`` with the terminal cells it takes: two for a wide (CJK,
    emoji) one, none for a mark on the one before it (an accent, a Thai vowel sign), a
    format character (a zero-width space, a joiner), a variation selector, or a wide (emoji)
    character a joiner (ZWJ) ties to the one before it, which a terminal draws as one glyph;
    a narrow one after a joiner (a Devanagari half form's consonant) keeps its cell."""
    joined = False
    for c in text:
        wide = unicodedata.east_asian_width(c) in "WF"
        if (joined and wide) or _ZERO_WIDTH.match(c) or unicodedata.category(c) in _MARKS:
            yield c, 0
        else:
            yield c, 2 if wide else 1
        joined = c == "\u200d"


_MARKS = ("Mn", "Me", "Cf")  # marks on the character before, and format characters
_ZERO_WIDTH = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef]")  # variation selectors


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
