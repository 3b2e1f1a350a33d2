"""NVIDIA MIG profile names, from the device name or from its attributes."""

from __future__ import annotations

import pytest

from accelkit_cuda.mig import memory_gb, profile_from_attributes, profile_from_name

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "1g.10gb"),
        ("NVIDIA A100-SXM4-40GB MIG 1c.2g.10gb", "1c.2g.10gb"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "1g.10gb+me"),
        ("NVIDIA A100-SXM4-80GB", None),
        ("MIG instance", None),
    ],
)
def test_profile_from_name(name, profile):
    assert profile_from_name(name) == profile


@pytest.mark.parametrize(
    ("instance_mb", "parent_mb", "gb"),
    [
        (4864, 40536, 5),  # A100 40GB, 1g.5gb
        (9856, 40536, 10),  # A100 40GB, 2g.10gb
        (19968, 40536, 20),  # A100 40GB, 3g.20gb
        (9728, 81920, 10),  # A100 80GB, 1g.10gb
        (40192, 81920, 40),  # A100 80GB, 3g.40gb
        (9984, 81559, 10),  # H100 80GB, 1g.10gb
        (81920, 81920, 80),  # the whole GPU
    ],
)
def test_memory_gb_matches_nvidia_profiles(instance_mb, parent_mb, gb):
    assert memory_gb(instance_mb, parent_mb * MIB) == gb


def test_memory_gb_refuses_an_empty_parent():
    with pytest.raises(ValueError, match="must be positive"):
        memory_gb(10, 0)


def test_profile_from_attributes():
    assert profile_from_attributes(3, 3, 40192, 81920 * MIB) == "3g.40gb"
    assert profile_from_attributes(2, 1, 19968, 81920 * MIB) == "1c.2g.20gb"
