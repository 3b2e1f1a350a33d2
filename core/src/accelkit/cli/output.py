"""Printing results: JSON for machines, plain aligned tables for people.

Tables are drawn as ``kubectl`` and ``docker`` draw theirs: a header of upper-case column
names, columns left-aligned and two spaces apart, one line per row, nothing wrapped. They cost
nothing to draw, read the same in a terminal, a pipe and a log, and ``awk`` takes them apart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container, Sequence
from typing import Any

import click

#: a device id that ends in a number: ``cuda3``, ``7``, ``npu-12``
_NUMBERED = re.compile(r"(.*?)(\d+)", re.ASCII)
_GAP = "  "


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout."""
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def render_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], *, right: Container[str] = ()
) -> list[str]:
    """The lines of a table: the header, then one line per row; ``None`` cells show as ``-``.

    The columns named in ``right`` (figures) are aligned right, the others left. Each line is
    made by one format of its cells (a table of thousands of rows is a status's).
    """
    cells = [[str(c).upper() for c in columns]]
    cells += [["-" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [max(map(len, column)) for column in zip(*cells, strict=True)]
    line = _GAP.join(
        f"{{:{'>' if c in right else '<'}{width}}}"
        for c, width in zip(columns, widths, strict=True)
    )
    return [line.format(*cells_of_line).rstrip() for cells_of_line in cells]


def print_table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, right: Container[str] = ()
) -> None:
    """Print ``title``, then the table (see :func:`render_table`)."""
    click.echo("\n".join([title, *render_table(columns, rows, right=right)]))


def compact_ids(ids: Sequence[str]) -> str:
    """``0,1,2,3,7`` → ``0-3,7``; ``cuda0,cuda1`` → ``cuda0-1``; other ids as they are."""
    runs: list[list[Any]] = []  # [prefix, first, last] of numbered ids, or [id] of others
    for device_id in ids:
        match = _NUMBERED.fullmatch(device_id)
        if match is None or str(int(match[2])) != match[2]:  # keep "007" as written
            runs.append([device_id])
            continue
        prefix, number = match[1], int(match[2])
        last = runs[-1] if runs else None
        if last is not None and len(last) == 3 and last[0] == prefix and last[2] + 1 == number:
            last[2] = number
        else:
            runs.append([prefix, number, number])
    texts = [
        run[0]
        if len(run) == 1
        else f"{run[0]}{run[1]}" + (f"-{run[2]}" if run[2] != run[1] else "")
        for run in runs
    ]
    return ",".join(texts) or "-"
