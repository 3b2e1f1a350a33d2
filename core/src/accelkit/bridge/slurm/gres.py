"""An agent's devices as Slurm GRES: the ``gres.conf`` lines and the node's ``Gres=`` value.

Every device of a *whole* slot (its alloc map's ``whole_slots``: whole GPUs, MIG-like
instances) of an accelerator plugin is one ``gres.conf`` line, in accelkit's natural order, so
Slurm's GRES index ``i`` of a name is the ``i``-th device of that name here
(:func:`indexed_devices`). ``File=`` is the device node the plugin's ``device_nodes`` names for
that device alone (nodes every device gets, like ``/dev/nvidiactl``, are left out); a device
without one is ``Count=1``. ``Cores=`` are the cores plugin's cores on the device's NUMA node.

Divisible slots (GPU shares) are not GRES: Slurm counts a GRES index as one device, which the
prolog books whole, and it has no count of shares that the prolog could book as shares (its
``shard`` GRES is a share of a ``gpu`` and is not reported per index). :func:`divisible_notes`
says so in ``gres.conf`` comments, one per slot.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from decimal import Decimal

import attrs

from accelkit.host import AgentView
from accelkit.partition import natural_sort_key
from accelkit.plugin import AbstractAgentContext, PluginRole
from accelkit.runtime.render.cpulist import format_cpu_list
from accelkit.types import (
    DeviceId,
    DeviceName,
    SlotName,
    format_amount,
    is_digits,
)
from accelkit.workload.device_nodes import device_nodes_of

__all__ = [
    "GresDevice",
    "divisible_notes",
    "gres_conf",
    "gres_devices",
    "indexed_devices",
    "node_gres",
    "slurm_type",
]

_NOT_TYPE = re.compile(r"[^a-z0-9_]+")


@attrs.frozen
class GresDevice:
    """One device as one ``gres.conf`` line."""

    name: str
    type: str
    plugin: DeviceName
    slot: SlotName
    device_id: DeviceId
    amount: Decimal
    file: str | None
    cores: tuple[int, ...]

    def line(self, node_name: str | None = None) -> str:
        """The ``gres.conf`` line (``NodeName=`` first when given)."""
        words = [f"NodeName={node_name}"] if node_name else []
        words += [f"Name={self.name}"]
        if self.type:
            words.append(f"Type={self.type}")
        words.append(f"File={self.file}" if self.file else "Count=1")
        if self.cores:
            words.append(f"Cores={format_cpu_list(self.cores)}")
        return " ".join(words)


def slurm_type(model: str) -> str:
    """A model name in Slurm's GRES type charset: lower-case letters, digits and ``_``."""
    return _NOT_TYPE.sub("_", model.lower()).strip("_")


def _cores_by_numa(agent: AgentView) -> dict[int, tuple[int, ...]]:
    cores = agent.provider(PluginRole.CORES)
    if cores is None:
        return {}
    ctx = agent.contexts[cores]
    found: dict[int, list[int]] = {}
    for device_id, info in ctx.alloc_map.device_slots.items():
        if info.numa_node is not None and is_digits(device_id):
            found.setdefault(info.numa_node, []).append(int(device_id))
    return {numa: tuple(sorted(cores)) for numa, cores in found.items()}


async def _device_nodes(
    ctx: AbstractAgentContext, device_id: DeviceId, timeout: Decimal
) -> list[str]:
    device = [d for d in ctx.plugin.devices if d.device_id == device_id]
    return await device_nodes_of(ctx.plugin.key, ctx.plugin, device, timeout)


async def gres_devices(
    agent: AgentView, names: Mapping[str, str], timeout: Decimal = Decimal(10)
) -> list[GresDevice]:
    """The agent's GRES devices, by plugin in the agent's order, each in natural order.

    ``timeout`` bounds each plugin's ``device_nodes``.
    """
    cores = _cores_by_numa(agent)
    found: list[GresDevice] = []
    for key, ctx in agent.contexts.items():
        if ctx.plugin.role is not PluginRole.ACCELERATOR:  # Slurm itself manages cores, memory
            continue
        models = {d.device_id: d.model_name for d in ctx.plugin.devices}
        whole_slots = ctx.alloc_map.whole_slots  # Slurm books each GRES index whole
        whole = [
            (device_id, info)
            for device_id, info in ctx.alloc_map.device_slots.items()
            if info.slot_name in whole_slots
        ]
        whole.sort(key=lambda item: natural_sort_key(item[0]))
        nodes = {d: await _device_nodes(ctx, d, timeout) for d, _ in whole}
        shared = Counter(path for paths in nodes.values() for path in set(paths))
        for device_id, info in whole:
            own = [p for p in nodes[device_id] if len(whole) == 1 or shared[p] < len(whole)]
            found.append(
                GresDevice(
                    name=names.get(key, key),
                    type=slurm_type(models.get(device_id, "")),
                    plugin=key,
                    slot=info.slot_name,
                    device_id=device_id,
                    amount=info.amount,
                    file=own[0] if own else None,
                    cores=cores.get(info.numa_node, ()) if info.numa_node is not None else (),
                )
            )
    return found


def divisible_notes(agent: AgentView) -> list[str]:
    """A ``gres.conf`` comment for each divisible accelerator slot of ``agent``: not offered."""
    notes: list[str] = []
    for ctx in agent.contexts.values():
        if ctx.plugin.role is not PluginRole.ACCELERATOR:
            continue
        divisible = ctx.alloc_map.divisible_slots
        offered = {i.slot_name for i in ctx.alloc_map.device_slots.values()}
        for slot in sorted(offered & divisible.keys(), key=natural_sort_key):
            notes.append(
                f"# {slot} (divisible, quantum {format_amount(divisible[slot])}) is not offered "
                "as GRES: Slurm cannot book shares of a device per GRES index; use whole-device "
                "slots in Slurm, or 'accelkit run --slots' outside it"
            )
    return notes


def indexed_devices(devices: Sequence[GresDevice]) -> dict[str, list[GresDevice]]:
    """Per GRES name, its devices in Slurm's index order."""
    by_name: dict[str, list[GresDevice]] = {}
    for device in devices:
        by_name.setdefault(device.name, []).append(device)
    return by_name


def gres_conf(devices: Sequence[GresDevice], node_name: str | None = None) -> list[str]:
    """The ``gres.conf`` lines of ``devices``."""
    return [d.line(node_name) for d in devices]


def node_gres(devices: Sequence[GresDevice]) -> str:
    """The ``Gres=`` value of the node's ``NodeName`` line (``name:type:count``, comma-joined)."""
    counts: Counter[tuple[str, str]] = Counter((d.name, d.type) for d in devices)
    return ",".join(
        f"{name}:{kind}:{count}" if kind else f"{name}:{count}"
        for (name, kind), count in counts.items()
    )
