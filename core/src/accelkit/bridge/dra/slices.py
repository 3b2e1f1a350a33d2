"""The ResourceSlices (``resource.k8s.io/v1``) of one node's pool, as the API server takes them.

One pool per node (named after it): the counter sets of partitionable GPUs in a slice of their
own (Kubernetes 1.36 keeps ``sharedCounters`` and ``devices`` in separate slices), then the
devices, at most 128 per slice and 64 in a slice holding taints or counter consumption (the API
server's limits). Every slice carries the pool's generation and the pool's slice count; a
change anywhere is published as a new generation of every slice.

Attributes (unqualified, so in the driver's domain): ``model``, ``uuid``, ``numaNode``,
``plugin``, ``agent``, ``deviceId``, ``slot``, and where the plugin tells them ``serial``,
``pciBusID``, ``boardPartNumber``, ``vbiosVersion`` and ``driverVersion`` (strings). Whole
devices carry their memory as capacity; divisible ones their slot (``cuda.shares`` → ``shares``)
as consumable capacity with ``allowMultipleAllocations`` and a request policy of the slot's
quantum: at least one quantum (a claim asking for nothing gets all of it), in steps of the
quantum where it is a whole number (the scheduler rounds steps in whole units; a fractional
amount that is not a multiple of the quantum is refused when the claim is prepared). An
unhealthy or cordoned device carries a ``NoSchedule`` taint ``<driver>/unhealthy`` (or
``/cordoned``) until it recovers. What other workloads of the node's ledger hold is not the
scheduler's to give: a divisible device offers only the rest as its capacity, and a device with
no room left (a whole one held at all) carries ``<driver>/held`` until it is freed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

from accelkit.bridge.dra.devices import DraDevice, dns_label
from accelkit.node.health_board import CORDON_PREFIX

__all__ = [
    "MAX_DEVICES",
    "MAX_DEVICES_TAINTED",
    "capacity_name",
    "device_entry",
    "pool_slices",
    "quantity",
]

MAX_DEVICES = 128
#: the limit of a slice with device taints or counter consumption
MAX_DEVICES_TAINTED = 64
#: the taint effect the scheduler honours for new allocations only
NO_SCHEDULE = "NoSchedule"
Json = dict[str, Any]


def quantity(amount: Decimal | int) -> str:
    """A Kubernetes quantity of ``amount`` (plain decimal notation, no exponent)."""
    return format(Decimal(amount).normalize(), "f")


def capacity_name(slot: str) -> str:
    """The capacity a divisible slot is published as: its name after the plugin's key
    (``cuda.shares`` → ``shares``, ``mem`` → ``mem``), as an identifier."""
    tail = slot.rsplit(".", 1)[-1]
    name = "".join(c if c.isalnum() else "_" for c in tail).strip("_")[:32]
    return name if name[:1].isalpha() else f"c{name}"[:32]


def _attributes(device: DraDevice, agent: str) -> Json:
    attributes: Json = {
        "plugin": {"string": device.plugin},
        "agent": {"string": agent},
        "deviceId": {"string": device.device_id},
        "slot": {"string": device.slot},
    }
    if device.model:
        attributes["model"] = {"string": device.model}
    if device.uuid:
        attributes["uuid"] = {"string": device.uuid}
    if device.numa_node is not None:
        attributes["numaNode"] = {"int": device.numa_node}
    for name, value in device.identity:
        attributes[name] = {"string": value}
    return attributes


def _free(device: DraDevice) -> Decimal:
    """What the ledger leaves of the device to claims."""
    return max(device.amount - device.held, Decimal(0))


def _taints(device: DraDevice, driver: str) -> list[Json]:
    """``NoSchedule`` for an unhealthy or cordoned device, and for one whose room other
    workloads of the ledger hold. No timeAdded: the API server stamps it, and a new report of
    the same state is no change."""
    found = []
    value = dns_label(device.device_id)
    if device.unhealthy is not None:
        cordoned = device.unhealthy.reason.startswith(CORDON_PREFIX)
        kind = "cordoned" if cordoned else "unhealthy"
        found.append({"key": f"{driver}/{kind}", "value": value, "effect": NO_SCHEDULE})
    full = device.held > 0 and (device.quantum is None or _free(device) < device.quantum)
    if full:
        found.append({"key": f"{driver}/held", "value": value, "effect": NO_SCHEDULE})
    return found


def _weight(device: DraDevice, members: Sequence[DraDevice]) -> int:
    """What a device draws from its counter set: its memory, or one per instance where the
    set's devices do not say their memory."""
    if all(m.memory > 0 for m in members):
        return device.memory
    return 1


def device_entry(device: DraDevice, driver: str, agent: str, members: Sequence[DraDevice]) -> Json:
    """One entry of a slice's ``devices``; ``members``: the devices of its counter set."""
    entry: Json = {"name": device.name, "attributes": _attributes(device, agent)}
    if device.quantum is not None:
        valid_range = {"min": quantity(device.quantum)}
        if device.quantum == device.quantum.to_integral_value():
            # the scheduler rounds up to a step in whole units (Quantity.Value()): a fractional
            # step would round every request up to 1, so the quantum is checked at prepare
            valid_range["step"] = quantity(device.quantum)
        entry["allowMultipleAllocations"] = True
        room = _free(device) if _free(device) >= device.quantum else device.amount
        entry["capacity"] = {
            capacity_name(device.slot): {
                "value": quantity(room),
                "requestPolicy": {"default": quantity(room), "validRange": valid_range},
            }
        }
    elif device.memory > 0:
        entry["capacity"] = {"memory": {"value": quantity(device.memory)}}
    if device.counter_set is not None:
        own = [m for m in members if m.name != device.counter_set]
        whole = device.name == device.counter_set
        draws = sum(_weight(m, own) for m in own) if whole else _weight(device, own)
        entry["consumesCounters"] = [
            {"counterSet": device.counter_set, "counters": {"draw": {"value": quantity(draws)}}}
        ]
    if taints := _taints(device, driver):
        entry["taints"] = taints
    return entry


def _counter_sets(devices: Sequence[DraDevice]) -> list[Json]:
    sets: dict[str, list[DraDevice]] = {}
    for device in devices:
        if device.counter_set is not None:
            sets.setdefault(device.counter_set, []).append(device)
    found = []
    for name, members in sets.items():
        own = [m for m in members if m.name != name]
        total = sum(_weight(m, own) for m in own)
        found.append({"name": name, "counters": {"draw": {"value": quantity(total)}}})
    return found


def _chunks(entries: Iterable[Json]) -> list[list[Json]]:
    chunks: list[list[Json]] = []
    current: list[Json] = []
    for entry in entries:
        limited = any("taints" in e or "consumesCounters" in e for e in [*current, entry])
        if len(current) >= (MAX_DEVICES_TAINTED if limited else MAX_DEVICES):
            chunks.append(current)
            current = []
        current.append(entry)
    if current or not chunks:
        chunks.append(current)
    return chunks


def pool_slices(
    devices: Sequence[DraDevice], *, driver: str, node: str, agent: str, generation: int
) -> list[Json]:
    """Every slice of the node's pool at ``generation``, named ``<node>-<driver>-<n>``."""
    by_set: dict[str | None, list[DraDevice]] = {}
    for device in devices:
        by_set.setdefault(device.counter_set, []).append(device)
    entries = [device_entry(d, driver, agent, by_set.get(d.counter_set, [])) for d in devices]
    specs: list[Json] = []
    if counter_sets := _counter_sets(devices):
        specs.append({"sharedCounters": counter_sets})
    specs += [{"devices": chunk} for chunk in _chunks(entries)]
    prefix = dns_label(f"{node}-{driver}")[:50].strip("-")
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {
                "name": f"{prefix}-{index}",
                "labels": {"app.kubernetes.io/managed-by": "accelkit"},
            },
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {
                    "name": node,
                    "generation": generation,
                    "resourceSliceCount": len(specs),
                },
                **spec,
            },
        }
        for index, spec in enumerate(specs)
    ]
