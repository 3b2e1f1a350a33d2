"""``resource.txt``: the allocation and the plugins' resource data, one ``KEY=VALUE`` per line.

Lines, in this order:

* ``<slot>=<total>``: the amount of each slot allocated, e.g. ``cuda.device=2``;
* ``<slot>@<device id>=<amount>``: the share of each device, e.g. ``cuda.shares@cuda0=0.25``;
* ``<KEY>=<value>``: the merged resource data of the hooks.

Amounts are exact decimals in plain notation (no exponent, never a float), so
:func:`parse_resource_txt` gets back the very same values. A resource-data key that looks like a
slot line, or holds ``=``, is refused rather than written ambiguously.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from accelkit.errors import WorkloadError
from accelkit.types import DeviceAllocation, format_amount


def _check_key(key: str, what: str) -> None:
    if not key or "=" in key or any(c in key for c in "\0\n\r"):
        msg = f"{what} {key!r} cannot be written to resource.txt"
        raise WorkloadError(msg)


def render_resource_txt(
    allocation: Mapping[str, DeviceAllocation], resource_data: Mapping[str, str]
) -> list[str]:
    """The lines (without newlines) for an allocation per plugin and the merged resource data."""
    totals: list[str] = []
    shares: list[str] = []
    slots: set[str] = set()
    for device_alloc in allocation.values():
        for slot, per_device in device_alloc.items():
            _check_key(slot, "slot")
            slots.add(slot)
            total = sum(per_device.values(), Decimal(0))
            totals.append(f"{slot}={format_amount(total)}")
            for device_id, amount in per_device.items():
                _check_key(f"{slot}@{device_id}", "device")
                shares.append(f"{slot}@{device_id}={format_amount(amount)}")
    data = []
    for key, value in resource_data.items():
        _check_key(key, "resource data key")
        if key in slots or key.partition("@")[0] in slots:
            msg = f"resource data key {key!r} clashes with an allocated slot"
            raise WorkloadError(msg)
        if any(c in value for c in "\0\n\r"):
            msg = f"resource data {key!r} has a value with NUL or newline"
            raise WorkloadError(msg)
        data.append(f"{key}={value}")
    return totals + shares + data


def parse_resource_txt(lines: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` lines back into a mapping; blank lines and ``#`` comments are skipped."""
    result: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        text = line.rstrip("\n")
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        key, sep, value = text.partition("=")
        if not sep or not key:
            msg = f"resource.txt line {number}: expected KEY=VALUE, got {text!r}"
            raise WorkloadError(msg)
        result[key] = value
    return result
