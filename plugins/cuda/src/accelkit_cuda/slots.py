"""The slots GPUs contribute: ``cuda.device``, ``cuda.shares`` and ``cuda.mig-<profile>``."""

from __future__ import annotations

from collections.abc import Iterable

from accelkit.types import ComputeDevice, DeviceId, DeviceSlotInfo, SlotName, SlotSpec, SlotType
from accelkit_cuda.config import AllocationMode, CUDAConfig
from accelkit_cuda.discovery import mig_profile

DEVICE_SLOT = SlotName("cuda.device")
SHARES_SLOT = SlotName("cuda.shares")
#: slot types that one request may not mix (fnmatch patterns)
EXCLUSIVE_SLOT_TYPES = ("cuda.device", "cuda.shares", "cuda.mig-*")


def mig_slot(profile: str) -> SlotName:
    """The UNIQUE slot of a MIG profile: ``1g.10gb`` → ``cuda.mig-1g.10gb``."""
    return SlotName(f"cuda.mig-{profile}")


def whole_gpu_slot(config: CUDAConfig) -> SlotSpec:
    """The slot whole GPUs are offered in, as the config's ``allocation`` chooses."""
    if config.allocation is AllocationMode.FRACTIONAL:
        return SlotSpec(
            SHARES_SLOT,
            SlotType.COUNT,
            display_name="GPU shares",
            display_unit="share",
            description=f"fractions of NVIDIA GPUs, {config.shares_per_device} per GPU",
            divisible=True,
            quantum=config.quantum,
        )
    return SlotSpec(
        DEVICE_SLOT,
        SlotType.COUNT,
        display_name="GPU",
        display_unit="GPU",
        description="whole NVIDIA GPUs",
        divisible=False,
    )


def mig_slot_spec(profile: str) -> SlotSpec:
    """Display metadata of a MIG profile's slot."""
    return SlotSpec(
        mig_slot(profile),
        SlotType.UNIQUE,
        display_name=f"MIG {profile}",
        display_unit="MIG instance",
        description=f"NVIDIA MIG instances of profile {profile}",
        divisible=False,
    )


def device_slots(
    devices: Iterable[ComputeDevice], config: CUDAConfig
) -> dict[DeviceId, DeviceSlotInfo]:
    """One slot per device: 1 GPU, the configured shares, or one MIG instance."""
    whole = whole_gpu_slot(config)
    per_gpu = config.shares_per_device if whole.name == SHARES_SLOT else 1
    slots: dict[DeviceId, DeviceSlotInfo] = {}
    for device in devices:
        if (profile := mig_profile(device)) is not None:
            slots[device.device_id] = DeviceSlotInfo(
                SlotType.UNIQUE, mig_slot(profile), 1, device.numa_node
            )
        else:
            slots[device.device_id] = DeviceSlotInfo(
                whole.type, whole.name, per_gpu, device.numa_node
            )
    return slots
