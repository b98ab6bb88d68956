"""The text ``cascade-proxy sessions`` and ``memory`` write on a terminal: stored text with
its control characters as escapes (``printable``), one table cell of it (``cell``), and
tables whose columns are measured in the cells a terminal gives each character, as
wcwidth counts them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from wcwidth import iter_graphemes, wcswidth

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
    terminal cells (``…`` its last), never inside a grapheme (a character with its marks,
    an emoji sequence)."""
    text = "-" if value is None or value == "" else str(value)
    text = printable(" ".join(text.split()))  # newlines and tabs would break the row
    if not width or _cells(text) <= width:
        return text
    kept, used = [], 0
    for grapheme, n in _widths(text):
        if used + n > width - 1:
            break
        kept.append(grapheme)
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
    """Each grapheme of ``text`` (a character with its marks, an emoji sequence) with the
    terminal cells wcwidth gives it, so a cut never splits one. A control character, to
    which wcwidth gives -1, takes one cell a character: ``printable`` has escaped those of a
    cell, and a header holds none."""
    for grapheme in iter_graphemes(text):
        n = wcswidth(grapheme)
        yield grapheme, n if n >= 0 else len(grapheme)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns two spaces apart, numbers right-aligned, widths in terminal
    cells; the last column is never padded. Each cell is measured once, for its column's
    width and its padding both."""
    cells = [[cell(v, 72) for v in row] for row in rows]
    lines = [list(header), *cells]
    measured = [[_cells(v) for v in values] for values in lines]
    widths = [max(m[i] for m in measured) for i in range(len(header))]
    numeric = [
        all(isinstance(row[i], int | float) or row[i] is None for row in rows) and rows
        for i in range(len(header))
    ]

    def line(values: Sequence[str], sizes: Sequence[int]) -> str:
        pads = [" " * (w - n) for n, w in zip(sizes, widths, strict=True)]
        pairs = enumerate(zip(values, pads, strict=True))
        out = [pad + v if numeric[i] else v + pad for i, (v, pad) in pairs]
        return "  ".join(out).rstrip()

    return "\n".join(line(v, m) for v, m in zip(lines, measured, strict=True))
