"""The mem plugin's config section."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from accelkit.errors import ConfigError
from accelkit_mem.config import MemConfig


@pytest.mark.parametrize(
    ("value", "factor"), [(1, Decimal(1)), (10, Decimal(10)), ("1.5", Decimal("1.5")), ("2", 2)]
)
def test_overcommit_factor(value: Any, factor: Decimal) -> None:
    assert MemConfig.from_mapping({"overcommit-factor": value}).overcommit_factor == factor


def test_default_is_no_overcommit() -> None:
    assert MemConfig.from_mapping({}).overcommit_factor == 1


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (0, "must be from 1 to 10, got 0"),
        ("0.5", "must be from 1 to 10, got '0.5'"),
        ("10.01", "must be from 1 to 10, got '10.01'"),
        ("nan", "must be from 1 to 10, got 'nan'"),
        ("inf", "must be from 1 to 10, got 'inf'"),
        ("lots", "must be a number from 1 to 10, got 'lots'"),
        (1.5, 'as an integer or a string such as "1.5", got 1.5'),
        (False, "got False"),
        (None, "got None"),
    ],
)
def test_bad_overcommit_factor_names_the_key(value: Any, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as info:
        MemConfig.from_mapping({"overcommit-factor": value})
    assert info.value.key == "overcommit-factor"


def test_unknown_keys_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown key") as info:
        MemConfig.from_mapping({"reserve": "1G"})
    assert info.value.key == "reserve"
