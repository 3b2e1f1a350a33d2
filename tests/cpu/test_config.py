"""The cpu plugin's config section."""

from __future__ import annotations

from typing import Any

import pytest

from accelkit.errors import ConfigError
from accelkit_cpu.config import CPUConfig


@pytest.mark.parametrize(("value", "factor"), [(1, 1), (10, 10), ("4", 4), (" 2 ", 2)])
def test_overcommit_factor(value: Any, factor: int) -> None:
    assert CPUConfig.from_mapping({"overcommit-factor": value}).overcommit_factor == factor


def test_default_is_no_overcommit() -> None:
    assert CPUConfig.from_mapping({}) == CPUConfig(1)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (0, "must be from 1 to 10, got 0"),
        (11, "must be from 1 to 10, got 11"),
        (-2, "must be from 1 to 10, got -2"),
        ("many", "must be a whole number from 1 to 10, got 'many'"),
        ("1.5", "must be a whole number from 1 to 10, got '1.5'"),
        (2.0, "must be a whole number from 1 to 10, got 2.0"),
        (True, "must be a whole number from 1 to 10, got True"),
        ([2], "must be a whole number from 1 to 10, got \\[2\\]"),
    ],
)
def test_bad_overcommit_factor_names_the_key(value: Any, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as info:
        CPUConfig.from_mapping({"overcommit-factor": value})
    assert info.value.key == "overcommit-factor"
    assert "'overcommit-factor'" in str(info.value)


def test_unknown_keys_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown key") as info:
        CPUConfig.from_mapping({"overcommit": 2})
    assert info.value.key == "overcommit"
