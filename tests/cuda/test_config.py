from __future__ import annotations

from decimal import Decimal

import pytest

from accelkit.errors import ConfigError
from accelkit_cuda import CUDAPlugin
from accelkit_cuda.config import AllocationMode, CUDAConfig, DeviceIdMode


def test_defaults():
    config = CUDAConfig.from_mapping({})
    assert config == CUDAConfig(
        DeviceIdMode.INDEX, AllocationMode.DISCRETE, Decimal(1), Decimal("0.01"), True
    )


def test_every_key():
    config = CUDAConfig.from_mapping(
        {
            "device-id": "uuid",
            "allocation": "fractional",
            "shares-per-device": "2.5",
            "quantum": "0.25",
            "allow-fragmentation": False,
            "health-interval": "0.5",
        }
    )
    assert config.device_id is DeviceIdMode.UUID
    assert config.allocation is AllocationMode.FRACTIONAL
    assert config.shares_per_device == Decimal("2.5")
    assert config.quantum == Decimal("0.25")
    assert config.allow_fragmentation is False
    assert config.health_interval == Decimal("0.5")


def test_integer_amounts_are_accepted():
    assert CUDAConfig.from_mapping({"shares-per-device": 4}).shares_per_device == Decimal(4)


@pytest.mark.parametrize(
    ("raw", "key", "words"),
    [
        ({"device-ids": "uuid"}, "device-ids", "unknown key"),
        ({"device-id": "serial"}, "device-id", "unknown"),
        ({"allocation": "shared"}, "allocation", "unknown"),
        ({"shares-per-device": 0.5}, "shares-per-device", "not a float"),
        ({"shares-per-device": "lots"}, "shares-per-device", "decimal string"),
        ({"shares-per-device": "0"}, "shares-per-device", "greater than zero"),
        ({"quantum": "-0.1"}, "quantum", "greater than zero"),
        ({"quantum": "NaN"}, "quantum", "decimal string"),
        ({"shares-per-device": "1", "quantum": "0.3"}, "shares-per-device", "multiple"),
        # a quotient of 31 digits: checked exactly, not raised from Decimal's %
        (
            {"shares-per-device": "10000000000.000000000000000000001", "quantum": "1E-20"},
            "shares-per-device",
            "multiple",
        ),
        ({"quantum": "1E-30"}, "quantum", "out of range"),
        ({"allow-fragmentation": "no"}, "allow-fragmentation", "true or false"),
        ({"health-interval": "0"}, "health-interval", "seconds above 0 and at most 86400"),
        ({"health-interval": "often"}, "health-interval", "number of seconds"),
    ],
)
def test_bad_values_name_the_key(raw, key, words):
    with pytest.raises(ConfigError, match=words) as caught:
        CUDAConfig.from_mapping(raw)
    assert caught.value.key == key
    assert repr(key) in str(caught.value)


def test_plugin_refuses_a_bad_config_at_construction():
    with pytest.raises(ConfigError):
        CUDAPlugin({"allocation": "everything"})
