"""The fake NVML's identity and topology calls (serial, part number, VBIOS; PCIe common
ancestor, NVLink state and far ends), as nvidia-ml-py answers them, and two multi-GPU nodes:
an 8-GPU NVSwitch board and two 4-GPU NVLink islands cutting across the NUMA nodes.

:class:`FakeTopologyCalls` is a base of ``FakeNVML`` (:mod:`.fake_nvml`), whose ``FakeGpu``
carries what these calls read: ``serial``, ``board_part_number`` and ``vbios_version``
(``None``: NOT_SUPPORTED), ``pcie_switch``, ``nvlinks`` and ``nvlinks_down``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .fake_nvml import FakeGpu

NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50


@dataclass(kw_only=True, eq=False)
class GpuTopology:
    """What a fake GPU tells of its identity and links (a base of ``FakeGpu``)."""

    #: identity; ``None`` answers NOT_SUPPORTED (GeForce boards have no serial or part number)
    serial: str | None = ""
    board_part_number: str | None = "692-2G506-0210-002"
    vbios_version: str | None = "92.00.9E.00.03"
    #: the PCIe switch the GPU sits behind (``None``: straight on a root port)
    pcie_switch: str | None = None
    #: active NVLinks in link order: the far end's PCI bus id and NVML device type; a GPU
    #: without any answers NOT_SUPPORTED for link 0, one with some INVALID_ARGUMENT past them
    nvlinks: list[tuple[str, int]] = field(default_factory=list)
    #: links that are there but down (``nvmlDeviceGetNvLinkState`` answers DISABLED)
    nvlinks_down: set[int] = field(default_factory=set)


class FakeTopologyCalls:
    """Identity and topology calls; the class using it has ``NVMLError``, ``_check`` and
    ``_parent`` (``FakeNVML``)."""

    NVMLError: Any
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS
    NVML_NVLINK_DEVICE_TYPE_GPU = NVML_NVLINK_DEVICE_TYPE_GPU
    NVML_NVLINK_DEVICE_TYPE_SWITCH = NVML_NVLINK_DEVICE_TYPE_SWITCH
    NVML_TOPOLOGY_SINGLE = NVML_TOPOLOGY_SINGLE
    NVML_TOPOLOGY_NODE = NVML_TOPOLOGY_NODE
    NVML_TOPOLOGY_SYSTEM = NVML_TOPOLOGY_SYSTEM

    def _check(self, handle: Any, function: str) -> None:
        raise NotImplementedError

    def _parent(self, mig: Any) -> Any:
        raise NotImplementedError

    # -- identity --------------------------------------------------------------------------
    def _identity(self, handle: Any, function: str, value: str) -> str:
        self._check(handle, function)
        gpu = handle if hasattr(handle, "nvlinks") else self._parent(handle)  # a MIG: its GPU
        found = getattr(gpu, value)
        if found is None:
            raise self.NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return str(found)

    def nvmlDeviceGetSerial(self, handle: Any) -> str:
        return self._identity(handle, "nvmlDeviceGetSerial", "serial")

    def nvmlDeviceGetBoardPartNumber(self, handle: Any) -> str:
        return self._identity(handle, "nvmlDeviceGetBoardPartNumber", "board_part_number")

    def nvmlDeviceGetVbiosVersion(self, handle: Any) -> str:
        return self._identity(handle, "nvmlDeviceGetVbiosVersion", "vbios_version")

    # -- topology --------------------------------------------------------------------------
    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:
        """The same switch: SINGLE; the same NUMA node: NODE; else SYSTEM. GPUs the fake
        knows neither of (no switch, no NUMA node) are NOT_SUPPORTED, as in some VMs."""
        self._check(device1, "nvmlDeviceGetTopologyCommonAncestor")
        self._check(device2, "nvmlDeviceGetTopologyCommonAncestor")
        if device1 is device2:
            return NVML_TOPOLOGY_INTERNAL
        for gpu in (device1, device2):
            if gpu.pcie_switch is None and gpu.numa_node is None:
                raise self.NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if device1.pcie_switch is not None and device1.pcie_switch == device2.pcie_switch:
            return NVML_TOPOLOGY_SINGLE
        if device1.numa_node is not None and device1.numa_node == device2.numa_node:
            return NVML_TOPOLOGY_NODE
        return NVML_TOPOLOGY_SYSTEM

    def _link(self, handle: Any, link: int, function: str) -> tuple[str, int]:
        self._check(handle, function)
        if not handle.nvlinks:
            raise self.NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(handle.nvlinks):
            raise self.NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return handle.nvlinks[link]

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        self._link(device, link, "nvmlDeviceGetNvLinkState")
        return NVML_FEATURE_DISABLED if link in device.nvlinks_down else NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> SimpleNamespace:
        """pynvml's wrapper of ``nvmlDeviceGetNvLinkRemotePciInfo_v2``."""
        bus_id, _kind = self._link(device, link, "nvmlDeviceGetNvLinkRemotePciInfo_v2")
        return SimpleNamespace(busId=bus_id.encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        _bus_id, kind = self._link(handle, link, "nvmlDeviceGetNvLinkRemoteDeviceType")
        return kind


def nvswitch_node(count: int = 8, switches: int = 4, links: int = 18) -> list[FakeGpu]:
    """An HGX board: ``count`` GPUs, each with ``links`` NVLinks spread over ``switches``
    NVSwitches (all GPUs joined), half the GPUs on NUMA node 0 and half on 1, two per PCIe
    switch."""
    from .fake_nvml import FakeGpu

    fabric = [f"00000000:{0xA0 + s:02X}:00.0" for s in range(switches)]
    return [
        FakeGpu(
            index,
            name="NVIDIA H100 80GB HBM3",
            numa_node=index * 2 // count,
            pcie_switch=f"sw{index // 2}",
            nvlinks=[
                (fabric[link % switches], NVML_NVLINK_DEVICE_TYPE_SWITCH) for link in range(links)
            ],
        )
        for index in range(count)
    ]


#: the NVLink islands of :func:`two_island_node`, by GPU index
ISLANDS = ((0, 1, 4, 5), (2, 3, 6, 7))


def two_island_node() -> list[FakeGpu]:
    """Eight GPUs in two NVLink islands of four that cut across the NUMA nodes: GPUs 0-3 on
    NUMA node 0 and 4-7 on 1 (two per PCIe switch), NVLink joining 0, 1, 4, 5 and 2, 3, 6, 7
    (each GPU has four links to each other GPU of its island, straight, no NVSwitch)."""
    from .fake_nvml import FakeGpu

    made = [
        FakeGpu(index, numa_node=index // 4, pcie_switch=f"sw{index // 2}") for index in range(8)
    ]
    for island in ISLANDS:
        for index in island:
            made[index].nvlinks = [
                (made[peer].bus_id, NVML_NVLINK_DEVICE_TYPE_GPU)
                for peer in island
                if peer != index
                for _ in range(4)
            ]
    return made
