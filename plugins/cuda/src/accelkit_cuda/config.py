"""The cuda plugin's section of the host config, parsed and checked once."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any

import attrs

from accelkit import ConfigError
from accelkit.config import SECONDS, choice, positive_decimal, read_section
from accelkit.types import is_multiple


class DeviceIdMode(enum.StrEnum):
    """How device ids are spelled: ``cuda<index>`` or the NVML UUID."""

    INDEX = "index"
    UUID = "uuid"


class AllocationMode(enum.StrEnum):
    """Whole GPUs (``cuda.device``) or shares of GPUs (``cuda.shares``)."""

    DISCRETE = "discrete"
    FRACTIONAL = "fractional"


class ShareEnforcement(enum.StrEnum):
    """Whether ``cuda.shares`` grants that cannot be enforced are granted anyway."""

    ADVISORY = "advisory"
    ENFORCED = "enforced"


@attrs.frozen
class CUDAConfig:
    """Validated plugin settings; see the :mod:`accelkit_cuda` docstring for the keys."""

    device_id: Annotated[DeviceIdMode, choice(DeviceIdMode, "device-id mode")] = DeviceIdMode.INDEX
    allocation: Annotated[AllocationMode, choice(AllocationMode, "allocation mode")] = (
        AllocationMode.DISCRETE
    )
    shares_per_device: Annotated[Decimal, positive_decimal("1")] = Decimal(1)
    quantum: Annotated[Decimal, positive_decimal("0.01")] = Decimal("0.01")
    allow_fragmentation: bool = True
    #: seconds between two readings of every GPU's health while ``watch_health()`` runs
    health_interval: Annotated[Decimal, SECONDS] = Decimal(5)
    #: "enforced": refuse a share grant that no mechanism enforces (see :mod:`.mps`)
    shares: Annotated[ShareEnforcement, choice(ShareEnforcement, "share enforcement")] = (
        ShareEnforcement.ADVISORY
    )
    #: enforce shares through CUDA MPS where the control executable exists
    mps: bool = True
    #: the MPS control executable, a path or a name looked up on PATH
    mps_control: str = "nvidia-cuda-mps-control"
    #: where the MPS pipe and log directories go; empty: ``cuda-mps`` in the default state dir
    mps_directory: str = ""

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> CUDAConfig:
        """Parse ``[plugins.config.cuda]``; a bad key or value is a :class:`ConfigError`."""
        settings = read_section(cls, config)
        if not is_multiple(settings.shares_per_device, settings.quantum):
            msg = (
                f"shares-per-device {settings.shares_per_device} is not a multiple of the "
                f"quantum {settings.quantum}"
            )
            raise ConfigError(msg, key="shares-per-device")
        return settings
