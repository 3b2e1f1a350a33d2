"""Sizes as operators write them: ``"16G"``, ``"512m"``, ``"16GiB"``, ``"1GB"``, ``"0"``.

``K/M/G/T/P`` and ``KiB/MiB/GiB/TiB/PiB`` are binary (powers of 1024), ``KB/MB/GB/TB/PB``
decimal (powers of 1000), as DESIGN §7 says. Digits are ASCII only.
"""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = ["format_binary_size", "format_human_size", "parse_binary_size"]

_UNITS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
_SIZE = re.compile(
    r"(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?:(?P<unit>[kmgtp])(?P<suffix>ib|b)?|(?P<bytes>b))?",
    re.IGNORECASE | re.ASCII,
)


def parse_binary_size(text: str | int) -> int:
    """Parse a byte count with an optional unit.

    Accepts ``"0"``, ``"512m"``, ``"16G"``, ``"1.5g"``, ``"16GiB"`` (binary), ``"1GB"``
    (decimal: 10**9), ``"512B"`` and plain integers. A fractional size must come out as a whole
    number of bytes.

    Raises:
        ValueError: the text is not a size, is negative, or is not a whole number of bytes.
    """
    if isinstance(text, bool):
        msg = f"not a size: {text!r}"
        raise ValueError(msg)
    if isinstance(text, int):
        if text < 0:
            msg = f"size must not be negative, got {text}"
            raise ValueError(msg)
        return text
    if not isinstance(text, str):
        msg = f"a size must be a string like '16G' or an integer, not {type(text).__name__}"
        raise ValueError(msg)
    stripped = text.strip()
    if stripped.startswith("-"):
        msg = f"size must not be negative, got {text!r}"
        raise ValueError(msg)
    match = _SIZE.fullmatch(stripped)
    if match is None:
        msg = (
            f"not a size: {text!r} (expected a number with an optional unit: K, M, G, T or"
            " KiB, MiB, GiB, TiB are binary, KB, MB, GB, TB decimal)"
        )
        raise ValueError(msg)
    unit = (match["unit"] or "").lower()
    base = 1000 if (match["suffix"] or "").lower() == "b" else 1024
    value = Decimal(match["number"]) * (base ** _UNITS[unit])
    if value != value.to_integral_value():
        msg = f"size {text!r} is not a whole number of bytes"
        raise ValueError(msg)
    return int(value)


def format_binary_size(size: int) -> str:
    """Render a byte count with the largest binary suffix that divides it exactly."""
    for suffix, power in (("T", 4), ("G", 3), ("M", 2), ("K", 1)):
        unit = 1024**power
        if size and size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def format_human_size(size: int) -> str:
    """A byte count for people: the largest binary unit it reaches, with one decimal at most.

    Exact where the unit divides it (``16G``), else rounded to a tenth (``23.5G``); the exact
    value belongs in ``--json``. Parsing the text back gives the size only where it is exact.
    """
    for suffix, power in (("T", 4), ("G", 3), ("M", 2), ("K", 1)):
        unit = 1024**power
        if size >= unit:
            tenths = (Decimal(size) / unit).quantize(Decimal("0.1"))
            text = f"{tenths.normalize():f}"
            return f"{text}{suffix}"
    return f"{size}B" if size else "0"
