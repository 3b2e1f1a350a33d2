"""NVIDIA's MIG profile names (``1g.10gb``, ``1c.2g.20gb``) for MIG instances."""

from __future__ import annotations

import re

_MIB = 1024 * 1024
_GIB = 1024 * _MIB
#: NVML names a MIG device "<parent name> MIG <profile>"
_PROFILE_IN_NAME = re.compile(r"\bMIG\s+(\d+(?:c\.\d+)?g\.\d+gb\S*)\s*$")


def profile_from_name(name: str) -> str | None:
    """The profile NVML put in a MIG device's name (``... MIG 1g.10gb`` → ``1g.10gb``)."""
    match = _PROFILE_IN_NAME.search(name)
    return match.group(1) if match else None


def memory_gb(instance_mb: int, parent_total_bytes: int) -> int:
    """The ``<n>gb`` of a profile, computed the way NVIDIA's tools do.

    The instance's share of the parent's memory is rounded up to eighths, then scaled by the
    parent's memory in whole GiB (rounded up) and rounded to the nearest integer. Integer
    arithmetic only: e.g. 4864 MiB of a 40 GB A100 is one eighth, so ``5gb``.
    """
    if parent_total_bytes <= 0:
        msg = f"parent GPU memory must be positive, got {parent_total_bytes}"
        raise ValueError(msg)
    eighths = -(-(instance_mb * _MIB * 8) // parent_total_bytes)
    parent_gb = -(-parent_total_bytes // _GIB)
    return (eighths * parent_gb * 2 + 8) // 16  # round(eighths * parent_gb / 8), halves up


def profile_from_attributes(
    gpu_slices: int, compute_slices: int, instance_mb: int, parent_total_bytes: int
) -> str:
    """``<g>g.<n>gb``, or ``<c>c.<g>g.<n>gb`` when the compute instance is smaller."""
    size = f"{gpu_slices}g.{memory_gb(instance_mb, parent_total_bytes)}gb"
    return size if compute_slices == gpu_slices else f"{compute_slices}c.{size}"
