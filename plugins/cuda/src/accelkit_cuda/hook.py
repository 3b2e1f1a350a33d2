"""What a workload needs to see its GPUs: environment, device nodes and CDI names.

The hook is stateless: :func:`workload_config` is a pure function of the workload, the
allocation and the allocated devices, so an agent that restarts rebuilds the same config.
Visible devices are ordered by natural device-id order (``cuda2`` before ``cuda10``), never by
the order of the allocation mapping. A container with MIG instances also gets each instance's
``/dev/nvidia-caps/nvidia-cap<N>`` nodes (its GPU-instance and compute-instance access caps),
without which CUDA inside the container cannot open the instance.

With ``cuda.shares``, a workload's share of a GPU also caps its GPU memory there (the share of
the GPU's memory, rounded down) through ``nvmlDeviceSetMemoryLimits_v1`` where the driver has
it: set once the workload exists, lifted when it is gone, under the workload id as the limit's
name space. Where the driver lacks the call the limit is skipped and logged, never faked.
Shares are enforced through CUDA MPS where it is available (:mod:`accelkit_cuda.shares`): the
hook joins the GPU's MPS daemon before the workload starts and leaves it once it is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Protocol

import attrs

from accelkit import WorkloadCreationDenied, natural_sort_key
from accelkit.plugin import AbstractLifecycleHook
from accelkit.types import (
    ComputeDevice,
    DeviceAllocation,
    DeviceId,
    Mount,
    Workload,
    WorkloadConfig,
    WorkloadType,
    format_amount,
)
from accelkit_cuda.config import ShareEnforcement
from accelkit_cuda.mps import MPS
from accelkit_cuda.shares import hold_shares, release_shares
from accelkit_cuda.slots import SHARES_SLOT

#: device nodes every container with a GPU needs besides ``/dev/nvidia<minor>``
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
DRIVER_CAPABILITIES = "compute,utility"
#: NVIDIA_VISIBLE_DEVICES value that gives a container no GPU
NO_DEVICES = "void"
#: where the MIG capability device nodes live
CAPS_DIR = "/dev/nvidia-caps"

log = logging.getLogger(__name__)


class MemoryLimiter(Protocol):
    """Sets per-workload GPU memory limits (the plugin, through NVML)."""

    async def limit_memory(self, device_id: DeviceId, name_space: str, limit: int | None) -> bool:
        """Cap (or, with ``None``, free) ``name_space`` on a device; False where unsupported."""
        ...


def share_memory_limits(
    device_alloc: DeviceAllocation,
    devices: Mapping[DeviceId, ComputeDevice],
    shares_per_device: Decimal,
) -> dict[DeviceId, int]:
    """Bytes each ``cuda.shares`` grant may use: its fraction of the GPU's memory, rounded down."""
    shares = device_alloc.get(SHARES_SLOT, {})
    return {
        device_id: int(devices[device_id].memory_size * share / shares_per_device)
        for device_id, share in sorted(shares.items(), key=lambda item: natural_sort_key(item[0]))
        if share > 0 and device_id in devices
    }


def _allocated(device_alloc: DeviceAllocation) -> list[DeviceId]:
    wanted = {d for per_device in device_alloc.values() for d, n in per_device.items() if n > 0}
    return sorted(wanted, key=natural_sort_key)


def _pairs(items: list[tuple[int, str]]) -> str:
    return ",".join(f"{index}:{value}" for index, value in items)


def device_nodes(devices: Sequence[ComputeDevice]) -> list[str]:
    """The nodes a container given ``devices`` opens: each GPU's ``/dev/nvidia<minor>``, the
    control nodes and the MIG instances' access caps (none for no device)."""
    if not devices:
        return []
    minors = dict.fromkeys(d.extra.get("minor", "") for d in devices)
    if "" in minors:
        msg = f"cuda: a device of {[d.device_id for d in devices]} has no device minor number"
        raise WorkloadCreationDenied(msg)
    caps = [
        f"{CAPS_DIR}/nvidia-cap{minor}"
        for d in devices
        for minor in d.extra.get("mig_caps", "").split(",")
        if minor
    ]
    return [f"/dev/nvidia{minor}" for minor in minors] + list(CONTROL_DEVICES) + caps


def workload_config(
    workload: Workload,
    device_alloc: DeviceAllocation,
    devices: Mapping[DeviceId, ComputeDevice],
) -> WorkloadConfig:
    """The config that exposes exactly the allocated GPUs (MIG instances by their MIG UUID).

    Resource data: ``CUDA_GLOBAL_DEVICE_IDS`` maps each visible index to its device id
    (``0:cuda0,1:cuda3``); with ``cuda.shares``, ``CUDA_DEVICE_SHARES`` maps each visible index
    to the share granted on that GPU (``0:0.5,1:0.25``).
    """
    ordered = _allocated(device_alloc)
    uuids: list[str] = []
    for device_id in ordered:
        device = devices.get(device_id)
        if device is None or not device.uuid:
            msg = f"cuda: allocated device {device_id!r} is unknown or has no UUID"
            raise WorkloadCreationDenied(msg)
        uuids.append(device.uuid)
    resource_data = {"CUDA_GLOBAL_DEVICE_IDS": _pairs(list(enumerate(ordered)))}
    shares = device_alloc.get(SHARES_SLOT, {})
    granted = [(i, format_amount(shares.get(d, Decimal(0)))) for i, d in enumerate(ordered)]
    if shares:
        resource_data["CUDA_DEVICE_SHARES"] = _pairs(granted)
    if workload.type is WorkloadType.PROCESS_TREE:
        return WorkloadConfig(
            env_vars={"CUDA_VISIBLE_DEVICES": ",".join(uuids)}, resource_data=resource_data
        )
    if not uuids:
        return WorkloadConfig(
            env_vars={"NVIDIA_VISIBLE_DEVICES": NO_DEVICES}, resource_data=resource_data
        )
    nodes = device_nodes([devices[d] for d in ordered])
    mounts: tuple[Mount, ...] = tuple(Mount.device(path) for path in nodes)
    return WorkloadConfig(
        env_vars={
            "NVIDIA_VISIBLE_DEVICES": ",".join(uuids),
            "NVIDIA_DRIVER_CAPABILITIES": DRIVER_CAPABILITIES,
        },
        resource_data=resource_data,
        # WorkloadConfig.mounts uses the bare `tuple` converter, which mypy cannot solve
        mounts=mounts,
        cdi_devices=tuple(f"nvidia.com/gpu={uuid}" for uuid in uuids),
    )


class CUDALifecycleHook(AbstractLifecycleHook):
    """Exposes the allocated GPUs to one workload; holds no state of its own.

    ``limiter`` and ``shares_per_device`` enable the per-share memory limits; ``mps`` and
    ``shares`` say how share grants are enforced (:mod:`accelkit_cuda.shares`).
    """

    def __init__(
        self,
        workload: Workload,
        device_alloc: DeviceAllocation,
        *,
        devices: Mapping[DeviceId, ComputeDevice] | None = None,
        limiter: MemoryLimiter | None = None,
        shares_per_device: Decimal = Decimal(1),
        mps: MPS | None = None,
        shares: ShareEnforcement = ShareEnforcement.ADVISORY,
    ) -> None:
        super().__init__(workload, device_alloc, devices=devices)
        self.limiter = limiter
        self.shares_per_device = shares_per_device
        self.mps = mps
        self.shares = shares

    def _limits(self) -> dict[DeviceId, int]:
        return share_memory_limits(self.device_alloc, self.devices, self.shares_per_device)

    async def pre_create(self) -> WorkloadConfig:
        config = workload_config(self.workload, self.device_alloc, self.devices)
        hold = await hold_shares(
            self.workload,
            self.device_alloc,
            self.devices,
            mps=self.mps,
            mode=self.shares,
            shares_per_device=self.shares_per_device,
        )
        if hold is None:
            return config
        mounts: tuple[Mount, ...] = ()
        if self.workload.type is not WorkloadType.PROCESS_TREE:
            mounts = hold.mounts  # a process sees the host's pipe directory as it is
        return attrs.evolve(
            config,
            env_vars={**config.env_vars, **hold.env},
            resource_data={**config.resource_data, "CUDA_SHARE_ENFORCEMENT": hold.enforcement},
            mounts=(*config.mounts, *mounts),
        )

    async def post_create(self) -> None:
        """Cap the workload's GPU memory on each shared GPU where the driver can."""
        if (limiter := self.limiter) is None:
            return
        for device_id, limit in self._limits().items():
            if not await limiter.limit_memory(device_id, self.workload.id, limit):
                log.info(
                    "cuda: no memory limit for %s on %s: the driver has no "
                    "nvmlDeviceSetMemoryLimits_v1 (or the GPU does not support it)",
                    self.workload.id,
                    device_id,
                )

    async def post_terminate(self) -> None:
        """Lift the limits ``post_create`` set and leave the GPU's MPS daemon (stopped when
        no share workload is left); safe to call more than once."""
        await release_shares(self.workload, self.device_alloc, self.devices, mps=self.mps)
        if (limiter := self.limiter) is None:
            return
        for device_id in self._limits():
            await limiter.limit_memory(device_id, self.workload.id, None)
