"""Printing results: JSON for machines, rich tables for people."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout."""
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a table for people; ``None`` cells show as ``-``."""
    # rich is imported here, not at the top: JSON output never pays for it
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")  # never cut a number short
    for row in rows:
        table.add_row(*("-" if cell is None else str(cell) for cell in row))
    Console(soft_wrap=True).print(table)
