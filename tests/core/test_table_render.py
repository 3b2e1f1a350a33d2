"""Tables are drawn one format per line, exactly as padding each cell drew them."""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.cli.output import render_table


def padded(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], right: Container[str] = ()
) -> list[str]:
    """The table as each cell padded on its own draws it (the drawing before the formats)."""
    cells = [[str(c).upper() for c in columns]]
    cells += [["-" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    pads = [str.rjust if c in right else str.ljust for c in columns]
    return [
        "  ".join(
            pad(cell, width) for cell, width, pad in zip(line, widths, pads, strict=True)
        ).rstrip()
        for line in cells
    ]


cell = st.none() | st.integers() | st.text(max_size=8)  # braces, spaces, any code point


@given(st.data(), st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=5))
def test_a_table_reads_as_its_cells_padded_one_by_one(data, columns):
    rows = data.draw(st.lists(st.lists(cell, min_size=len(columns), max_size=len(columns))))
    right = data.draw(st.sets(st.sampled_from(columns)))
    assert render_table(columns, rows, right=right) == padded(columns, rows, right)


def test_a_row_of_another_length_is_refused():
    with pytest.raises(ValueError, match="zip"):
        render_table(["a", "b"], [["1", "2"], ["3"]])
