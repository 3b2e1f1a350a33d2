"""What NVML tells of the node's GPUs: the system, each GPU's identity, MIG, links."""

from __future__ import annotations

from functools import partial
from typing import Any

from accelkit_cuda.nvml import (
    ABSENT_CODES,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_FOUND,
    FEATURE_ENABLED,
    MIG_ENABLE,
    NVLINK_DEVICE_TYPE_SWITCH,
    NVLINK_MAX_LINKS,
    Handle,
    NVMLCalls,
    text,
)

#: CUDA cores per streaming multiprocessor by compute capability (major, or (major, minor)),
#: from NVIDIA's CUDA programming guide; GP100 and GA100 have half the cores of their siblings
CORES_PER_SM: dict[tuple[int, ...], int] = {
    (3,): 192,
    (5,): 128,
    (6, 0): 64,
    (6,): 128,
    (7,): 64,
    (8, 0): 64,
    (8,): 128,
    (9,): 128,
    (10,): 128,
    (12,): 128,
}


class NVMLSystem(NVMLCalls):
    """NVML itself: starting and stopping it, and the versions of the driver it talks to."""

    def init(self) -> None:
        self.module.nvmlInit()

    def shutdown(self) -> None:
        self.module.nvmlShutdown()

    def driver_version(self) -> str:
        return text(self.module.nvmlSystemGetDriverVersion())

    def nvml_version(self) -> str:
        return text(self.module.nvmlSystemGetNVMLVersion())

    def cuda_driver_version(self) -> str:
        """The CUDA version the driver supports, as ``major.minor`` (12040 → ``12.4``)."""
        version = int(self.module.nvmlSystemGetCudaDriverVersion())
        return f"{version // 1000}.{version % 1000 // 10}"


class NVMLDevices(NVMLCalls):
    """The GPUs: how many, their handles, and what each one is (a MIG handle answers too)."""

    def count(self) -> int:
        return int(self.module.nvmlDeviceGetCount())

    def handle_by_index(self, index: int) -> Handle:
        return self.module.nvmlDeviceGetHandleByIndex(index)

    def name(self, handle: Handle) -> str:
        return text(self.module.nvmlDeviceGetName(handle))

    def uuid(self, handle: Handle) -> str:
        return text(self.module.nvmlDeviceGetUUID(handle))

    def memory_size(self, handle: Handle) -> int:
        """The framebuffer memory, in bytes."""
        return int(self.module.nvmlDeviceGetMemoryInfo(handle).total)

    def pci_bus_id(self, handle: Handle) -> str:
        return text(self.module.nvmlDeviceGetPciInfo(handle).busId)

    def numa_node(self, handle: Handle) -> int | None:
        node = self.optional(lambda: int(self.module.nvmlDeviceGetNumaNodeId(handle)))
        return None if node is None or node < 0 else node

    def minor_number(self, handle: Handle) -> int:
        return int(self.module.nvmlDeviceGetMinorNumber(handle))

    def core_count(self, handle: Handle) -> int | None:
        return self.optional(lambda: int(self.module.nvmlDeviceGetNumGpuCores(handle)))

    def compute_capability(self, handle: Handle) -> tuple[int, int] | None:
        found = self.optional(lambda: self.module.nvmlDeviceGetCudaComputeCapability(handle))
        return None if found is None else (int(found[0]), int(found[1]))

    def gpu_sm_count(self, handle: Handle) -> int | None:
        """SMs of a whole GPU: its CUDA cores over the cores per SM of its compute capability.

        ``nvmlDeviceGetAttributes`` answers for MIG handles only; ``None`` when NVML tells
        neither figure or the architecture is unknown.
        """
        cores = self.core_count(handle)
        capability = self.compute_capability(handle)
        if cores is None or capability is None:
            return None
        per_sm = CORES_PER_SM.get(capability) or CORES_PER_SM.get(capability[:1])
        if per_sm is None or cores % per_sm:
            return None
        return cores // per_sm

    def serial(self, handle: Handle) -> str | None:
        return self.identity(lambda: self.module.nvmlDeviceGetSerial(handle))

    def board_part_number(self, handle: Handle) -> str | None:
        return self.identity(lambda: self.module.nvmlDeviceGetBoardPartNumber(handle))

    def vbios_version(self, handle: Handle) -> str | None:
        return self.identity(lambda: self.module.nvmlDeviceGetVbiosVersion(handle))


class NVMLMig(NVMLCalls):
    """The MIG instances of a GPU: whether it has MIG mode on, and each instance's make-up."""

    def enabled(self, handle: Handle) -> bool:
        modes = self.optional(lambda: self.module.nvmlDeviceGetMigMode(handle))
        return modes is not None and int(modes[0]) == MIG_ENABLE

    def instances(self, handle: Handle) -> list[tuple[int, Handle]]:
        """The MIG instances of a GPU as ``(slot index, handle)``; unused slots are skipped."""
        found = []
        for index in range(int(self.module.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                found.append(
                    (index, self.module.nvmlDeviceGetMigDeviceHandleByIndex(handle, index))
                )
            except self.error_type as exc:
                if self.error_code(exc) not in {ERROR_NOT_FOUND, ERROR_INVALID_ARGUMENT}:
                    raise
        return found

    def attributes(self, handle: Handle) -> Any:
        """``nvmlDeviceGetAttributes``: slice counts and memory of a MIG instance."""
        return self.module.nvmlDeviceGetAttributes(handle)

    def instance_ids(self, handle: Handle) -> tuple[int, int]:
        """The GPU-instance and compute-instance ids of a MIG device."""
        return (
            int(self.module.nvmlDeviceGetGpuInstanceId(handle)),
            int(self.module.nvmlDeviceGetComputeInstanceId(handle)),
        )


class NVMLLinks(NVMLCalls):
    """How two GPUs are joined: NVLinks (direct or through an NVSwitch) and PCIe."""

    def common_ancestor(self, first: Handle, second: Handle) -> int | None:
        """``nvmlDeviceGetTopologyCommonAncestor``: the PCIe level joining two GPUs
        (``NVML_TOPOLOGY_SINGLE`` … ``NVML_TOPOLOGY_SYSTEM``); ``None`` where NVML cannot say."""
        return self.optional(
            lambda: int(self.module.nvmlDeviceGetTopologyCommonAncestor(first, second))
        )

    def nvlink_peers(self, handle: Handle) -> list[tuple[str, bool]]:
        """The PCI bus ids at the far end of each active NVLink, with whether it is an
        NVSwitch; empty for a GPU without NVLink. Links are asked in order until NVML says the
        GPU has no such link (``NOT_SUPPORTED`` or ``INVALID_ARGUMENT``)."""
        peers: list[tuple[str, bool]] = []
        last = int(getattr(self.module, "NVML_NVLINK_MAX_LINKS", NVLINK_MAX_LINKS))
        for link in range(last):
            try:
                state = int(self.module.nvmlDeviceGetNvLinkState(handle, link))
            except self.absent_types:
                break
            except self.error_type as exc:
                if self.error_code(exc) in {*ABSENT_CODES, ERROR_INVALID_ARGUMENT}:
                    break
                raise
            if state != FEATURE_ENABLED:
                continue
            remote = text(self.module.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            kind = self.optional(partial(self._remote_type, handle, link))
            peers.append((remote, kind == NVLINK_DEVICE_TYPE_SWITCH))
        return peers

    def _remote_type(self, handle: Handle, link: int) -> int:
        return int(self.module.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link))
