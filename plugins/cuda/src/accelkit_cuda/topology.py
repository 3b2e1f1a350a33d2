"""How close the GPUs are to each other, and which GPUs a multi-GPU grant should get.

NVML tells two things. The NVLinks of each GPU (``nvmlDeviceGetNvLinkState``, and at the far
end of each active link ``nvmlDeviceGetNvLinkRemotePciInfo``: another GPU, or an NVSwitch whose
other links reach further GPUs): GPUs joined through links and switches form an NVLink
*island*. And the PCIe path between two GPUs (``nvmlDeviceGetTopologyCommonAncestor``): one or
several PCIe switches, a host bridge, the CPU's root complex (one NUMA node), or across the
sockets. Each pair of GPUs gets a level, lower is closer:

====  ==============================================================
0     one NVLink island
1     the same PCIe switch (``NVML_TOPOLOGY_SINGLE`` or ``MULTIPLE``)
2     the same NUMA node (``HOSTBRIDGE``, ``NODE``; or equal NUMA nodes where NVML cannot say)
3     across NUMA nodes (``SYSTEM``), or unknown
====  ==============================================================

:func:`choose` picks ``k`` free GPUs from a group of the lowest level that holds them (of
those, the one with the fewest free GPUs, so that larger groups stay whole for larger grants);
inside it, the grant takes the largest subgroups first, each as tightly as it allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from accelkit.types import DeviceId
from accelkit_cuda.nvml import Handle, sysfs_bus_id
from accelkit_cuda.nvml.inventory import NVMLLinks

NVLINK, PCIE_SWITCH, NUMA, SYSTEM = 0, 1, 2, 3
LEVEL_NAMES = {NVLINK: "NVLink", PCIE_SWITCH: "PCIe switch", NUMA: "NUMA node", SYSTEM: "system"}
#: NVML topology levels (``nvmlGpuTopologyLevel_t``) → ours
_PCIE_SWITCH_MAX = 20  # NVML_TOPOLOGY_MULTIPLE
_NUMA_MAX = 40  # NVML_TOPOLOGY_NODE


@attrs.frozen
class GPUPlace:
    """What the topology needs of one whole GPU."""

    device_id: DeviceId
    handle: Handle = attrs.field(eq=False, repr=False)
    bus_id: str
    numa_node: int | None


@attrs.frozen
class Topology:
    """The pairwise levels of the node's whole GPUs, in discovery order."""

    devices: tuple[DeviceId, ...]
    levels: Mapping[frozenset[DeviceId], int]
    #: the PCIe level of each pair alone, NVLink aside (what ``plan`` shows)
    pcie: Mapping[frozenset[DeviceId], int] = attrs.field(factory=dict)

    def level(self, first: DeviceId, second: DeviceId) -> int:
        if first == second:
            return NVLINK
        return self.levels.get(frozenset((first, second)), SYSTEM)

    def groups(
        self, level: int, among: Sequence[DeviceId] | None = None, *, pcie: bool = False
    ) -> list[list[DeviceId]]:
        """The GPUs of ``among`` (default: all) joined at ``level`` or closer (``pcie``: by
        their PCIe path alone), each group in discovery order, groups in the order of their
        first GPU."""
        members = list(self.devices if among is None else among)
        levels = self.pcie if pcie else self.levels
        root = {d: d for d in members}

        def find(d: DeviceId) -> DeviceId:
            while root[d] != d:
                root[d] = root[root[d]]
                d = root[d]
            return d

        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                if levels.get(frozenset((a, b)), SYSTEM) <= level:
                    root[find(b)] = find(a)
        found: dict[DeviceId, list[DeviceId]] = {}
        for d in members:
            found.setdefault(find(d), []).append(d)
        return list(found.values())

    def describe(self) -> str:
        """One line for ``accelkit plan``: the NVLink islands, the GPUs behind one PCIe
        switch and those on one NUMA node (by their PCIe path), each group of two or more."""
        parts = []
        for level in (NVLINK, PCIE_SWITCH, NUMA):
            groups = [g for g in self.groups(level, pcie=level != NVLINK) if len(g) > 1]
            if groups:
                shown = " | ".join(",".join(g) for g in groups)
                parts.append(f"{LEVEL_NAMES[level]}: {shown}")
        return "; ".join(parts) or "no GPUs joined closer than the system"


def choose(topology: Topology, free: Sequence[DeviceId], count: int) -> list[DeviceId]:
    """``count`` GPUs of ``free`` (in the order given), as close together as they can be."""
    return _choose(topology, list(free), count, SYSTEM)


def _choose(topology: Topology, free: list[DeviceId], count: int, top: int) -> list[DeviceId]:
    """The group of the lowest level up to ``top`` that holds ``count`` (the one with the
    fewest free GPUs among those), spanned as tightly as its subgroups allow."""
    if len(free) <= count:
        return free[:count]
    for level in range(NVLINK, top + 1):
        fitting = [g for g in topology.groups(level, free) if len(g) >= count]
        if fitting:
            return _span(topology, min(fitting, key=len), count, level - 1)
    return free[:count]


def _span(topology: Topology, group: list[DeviceId], count: int, level: int) -> list[DeviceId]:
    """``count`` GPUs of ``group``, none of whose subgroups at ``level`` holds them: the
    largest subgroups first, each taken as tightly as it allows."""
    if level < NVLINK or len(group) <= count:
        return group[:count]
    out: list[DeviceId] = []
    for sub in sorted(topology.groups(level, group), key=len, reverse=True):
        take = min(len(sub), count - len(out))
        out += _choose(topology, sub, take, level)
        if len(out) == count:
            break
    return out


def read_topology(lib: NVMLLinks, gpus: Iterable[GPUPlace]) -> Topology | None:
    """The topology of ``gpus``; ``None`` when NVML tells nothing of it (no NVLink, no PCIe
    path: a VM, a single GPU), so placement stays as it is without it. An NVML error on one
    GPU's links leaves that GPU without NVLink."""
    places = list(gpus)
    if len(places) < 2:
        return None
    # NVML's bus ids compared whatever their domain width and case
    by_bus = {sysfs_bus_id(p.bus_id): p.device_id for p in places}
    root: dict[str, str] = {}

    def find(node: str) -> str:
        root.setdefault(node, node)
        while root[node] != node:
            root[node] = root[root[node]]
            node = root[node]
        return node

    linked = False
    for place in places:
        try:
            peers = lib.nvlink_peers(place.handle)
        except lib.error_type:
            continue
        for remote, _switch in peers:
            far = sysfs_bus_id(remote)
            # another GPU, or a switch (whose other links join further GPUs)
            node = f"gpu:{by_bus[far]}" if far in by_bus else f"far:{far}"
            root[find(f"gpu:{place.device_id}")] = find(node)
            linked = True
    levels: dict[frozenset[DeviceId], int] = {}
    pcie_levels: dict[frozenset[DeviceId], int] = {}
    known = linked
    for i, a in enumerate(places):
        for b in places[i + 1 :]:
            pair = frozenset((a.device_id, b.device_id))
            pcie = _pcie_level(lib, a, b)
            known = known or pcie is not None
            if pcie is None:
                same = a.numa_node is not None and a.numa_node == b.numa_node
                pcie = NUMA if same else SYSTEM
            pcie_levels[pair] = pcie
            island = linked and find(f"gpu:{a.device_id}") == find(f"gpu:{b.device_id}")
            levels[pair] = NVLINK if island else pcie
    if not known:
        return None
    return Topology(tuple(p.device_id for p in places), levels, pcie_levels)


def _pcie_level(lib: NVMLLinks, a: GPUPlace, b: GPUPlace) -> int | None:
    try:
        ancestor = lib.common_ancestor(a.handle, b.handle)
    except lib.error_type:
        return None
    if ancestor is None:
        return None
    if ancestor <= _PCIE_SWITCH_MAX:
        return PCIE_SWITCH
    if ancestor <= _NUMA_MAX:
        return NUMA
    return SYSTEM
