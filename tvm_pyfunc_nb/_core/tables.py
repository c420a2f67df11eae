"""Plain-text tables, as the text views of traces, comparisons, timings and stats print them."""

from __future__ import annotations


def text_table(header: tuple[str, ...], rows: list[tuple]) -> str:
    """Rows under a header, each column as wide as its widest cell."""
    cells = [tuple(map(str, header)), *[tuple(map(str, row)) for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )
