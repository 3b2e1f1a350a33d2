"""Which devices an agent offers through DRA, and how each is shared.

Every device of the agent's accelerator plugins (cores and memory stay with the kubelet's own
managers) becomes one DRA device named after its id (a DNS label: other characters become
``-``; ids of two plugins that would clash get the plugin's key in front). A device of a
*whole* slot (``cuda.device``, MIG slots) goes to one claim at a time; a device of a
*divisible* slot (``cuda.shares``) to many at once, each consuming a multiple of the slot's
quantum. A MIG instance names its GPU (``parent_id``): the GPU and its instances draw on one
counter set, so the scheduler never hands out a GPU and one of its instances together.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal

import attrs

from accelkit.health import DeviceHealth
from accelkit.host import AgentView
from accelkit.partition import natural_sort_key
from accelkit.plugin import AbstractAgentContext, PluginRole
from accelkit.types import ComputeDevice, DeviceId, DeviceName, DeviceSlotInfo, SlotName

__all__ = ["DraDevice", "Held", "dns_label", "dra_devices", "slot_quantum"]

#: per (plugin, device): the amount held outside this driver's claims, and the holders
Held = Mapping[tuple[DeviceName, DeviceId], tuple[Decimal, tuple[str, ...]]]

_NOT_LABEL = re.compile(r"[^a-z0-9-]+")
#: the longest DNS label (device, pool and counter-set names)
LABEL_MAX = 63


def dns_label(text: str) -> str:
    """``text`` as a DNS label: lower case, other characters ``-``, at most 63 characters."""
    label = _NOT_LABEL.sub("-", text.lower()).strip("-")[:LABEL_MAX].strip("-")
    return label or "x"


def slot_quantum(ctx: AbstractAgentContext, info: DeviceSlotInfo) -> Decimal | None:
    """The quantum of a divisible slot, ``None`` for a whole one (the agent's alloc map says
    which: the plugin's declared slot kinds, else the kind its map gives the slot)."""
    return ctx.alloc_map.divisible_slots.get(info.slot_name)


@attrs.frozen
class DraDevice:
    """One device as the DRA driver publishes and prepares it."""

    name: str
    plugin: DeviceName
    device_id: DeviceId
    slot: SlotName
    #: the device's capacity in its slot
    amount: Decimal
    #: the smallest grant of a divisible slot; ``None``: handed out whole
    quantum: Decimal | None
    model: str = ""
    uuid: str = ""
    numa_node: int | None = None
    memory: int = 0
    #: identity attributes by their DRA name (``serial``, ``pciBusID``, …), where known
    identity: tuple[tuple[str, str], ...] = ()
    #: the counter set (the GPU of a MIG instance, or the GPU itself when it has instances)
    counter_set: str | None = None
    #: ``None`` while allocatable; the health that keeps it out of new grants otherwise
    unhealthy: DeviceHealth | None = None
    #: the amount other workloads of the ledger hold (``accelkit run``, Slurm, pods of the
    #: device-plugin bridge), which Kubernetes does not count, and who holds it
    held: Decimal = Decimal(0)
    holders: tuple[str, ...] = ()

    @property
    def divisible(self) -> bool:
        """Whether several claims may share the device."""
        return self.quantum is not None


def _device(
    name: str,
    key: DeviceName,
    *,
    found: ComputeDevice | None,
    device_id: DeviceId,
    info: DeviceSlotInfo,
    quantum: Decimal | None,
    health: DeviceHealth | None,
) -> DraDevice:
    parent = found.extra.get("parent_id", "") if found is not None else ""
    return DraDevice(
        name=name,
        plugin=key,
        device_id=device_id,
        slot=info.slot_name,
        amount=info.amount,
        quantum=quantum,
        model=found.model_name if found is not None else "",
        uuid=(found.uuid or "") if found is not None else "",
        numa_node=info.numa_node,
        memory=found.memory_size if found is not None else 0,
        counter_set=dns_label(parent) if parent else None,
        unhealthy=health if health is not None and not health.allocatable else None,
        identity=_identity(found),
    )


#: a device's ``extra`` fields published as DRA attributes, by their attribute name
IDENTITY_ATTRIBUTES = (
    ("serial", "serial"),
    ("pciBusID", "pci_bus_id"),
    ("boardPartNumber", "board_part_number"),
    ("vbiosVersion", "vbios_version"),
    ("driverVersion", "driver_version"),
)


def _identity(found: ComputeDevice | None) -> tuple[tuple[str, str], ...]:
    if found is None:
        return ()
    return tuple(
        (name, found.extra[key]) for name, key in IDENTITY_ATTRIBUTES if found.extra.get(key)
    )


def dra_devices(
    agent: AgentView,
    health: Mapping[DeviceName, Mapping[DeviceId, DeviceHealth]],
    held: Held | None = None,
) -> list[DraDevice]:
    """The agent's accelerator devices now, with the health that keeps any out of grants and
    what other workloads hold of each (``held``)."""
    raw: list[tuple[DeviceName, AbstractAgentContext, DeviceId, DeviceSlotInfo]] = []
    listed: dict[DeviceName, dict[DeviceId, ComputeDevice]] = {}
    for key, ctx in agent.contexts.items():
        if ctx.plugin.role is not PluginRole.ACCELERATOR:  # the kubelet manages cores, memory
            continue
        listed[key] = {d.device_id: d for d in ctx.list_devices()}
        slots = ctx.alloc_map.device_slots
        raw += [(key, ctx, d, slots[d]) for d in sorted(slots, key=natural_sort_key)]
    labels = [dns_label(d) for _k, _c, d, _i in raw]
    clash = {label for label in labels if labels.count(label) > 1}
    found: list[DraDevice] = []
    for (key, ctx, device_id, info), label in zip(raw, labels, strict=True):
        name = dns_label(f"{key}-{device_id}") if label in clash else label
        entry = _device(
            name,
            key,
            found=listed[key].get(device_id),
            device_id=device_id,
            info=info,
            quantum=slot_quantum(ctx, info),
            health=health.get(key, {}).get(device_id),
        )
        amount, holders = (held or {}).get((key, device_id), (Decimal(0), ()))
        found.append(attrs.evolve(entry, held=amount, holders=holders))
    parents = {d.counter_set for d in found if d.counter_set is not None}
    # a GPU with instances draws on its own counter set too (whole, it takes all of it)
    return [
        attrs.evolve(d, counter_set=d.name) if d.counter_set is None and d.name in parents else d
        for d in found
    ]
