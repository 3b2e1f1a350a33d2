"""The serialisable partition plan that ``accelkit plan`` prints (DESIGN §12)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from accelkit.health import DeviceHealth, HealthState
from accelkit.partition import natural_sort_key
from accelkit.partition.partitioner import PartitionResult
from accelkit.plugin import PluginRole
from accelkit.types import DeviceId, DeviceName, SlotName, format_amount

#: listings show the cores plugin first, the memory plugin second, the accelerators after
_DISPLAY_RANK = {PluginRole.CORES: 0, PluginRole.MEMORY: 1, PluginRole.ACCELERATOR: 2}


def display_order(keys: Iterable[str], roles: Mapping[DeviceName, PluginRole]) -> list[str]:
    """Plugin keys in display order: the cores plugin, the memory plugin, then the
    accelerators in natural order (``roles``: plugin key → role; a key without one counts
    as an accelerator)."""

    def rank(key: str) -> tuple[int, tuple[Any, ...]]:
        role = roles.get(DeviceName(key), PluginRole.ACCELERATOR)
        return _DISPLAY_RANK[role], natural_sort_key(key)

    return sorted(keys, key=rank)


def slot_order(slots: Iterable[str], roles: Mapping[DeviceName, PluginRole]) -> list[str]:
    """Slot names in display order: ``cpu``, ``mem``, then the other plugins' slots in the
    order of their plugins (see :func:`display_order`), each in natural order."""

    def rank(slot: str) -> tuple[int, tuple[Any, ...]]:
        role = PluginRole.of_bare_slot(slot)
        if role is None:
            role = roles.get(DeviceName(slot.split(".", 1)[0]), PluginRole.ACCELERATOR)
        return _DISPLAY_RANK[role], natural_sort_key(slot)

    return sorted(slots, key=rank)


def _amounts(
    values: Mapping[SlotName, Any], roles: Mapping[DeviceName, PluginRole]
) -> dict[str, str]:
    return {slot: format_amount(values[SlotName(slot)]) for slot in slot_order(values, roles)}


def health_warnings(
    health: Mapping[DeviceName, Mapping[DeviceId, DeviceHealth]],
    roles: Mapping[DeviceName, PluginRole] | None = None,
) -> list[str]:
    """A warning per device that takes no new grant (unhealthy or cordoned) or is degraded.

    ``roles`` (plugin key → role) orders the plugins as the plan does."""
    lines: list[str] = []
    for plugin in display_order(health, roles or {}):
        devices = health[DeviceName(plugin)]
        for device in sorted(devices, key=natural_sort_key):
            report = devices[device]
            if report.state is HealthState.HEALTHY:
                continue
            why = f" ({report.reason})" if report.reason else ""
            effect = "takes no new workload" if not report.allocatable else "is still allocatable"
            lines.append(f"device {plugin}/{device} is {report.state.value}{why}: it {effect}")
    return lines


def build_plan(result: PartitionResult, warnings: Iterable[str] = ()) -> dict[str, Any]:
    """The plan as plain JSON data: amounts are decimal strings, device ids in natural order.

    ``warnings`` are added after the partitioner's own (e.g. plugins that failed to load).
    """
    roles = result.roles
    agents: dict[str, Any] = {}
    for agent_id, parts in result.assignments.items():
        devices = {
            name: sorted(parts[DeviceName(name)].device_ids, key=natural_sort_key)
            for name in display_order(parts, roles)
        }
        agents[agent_id] = {
            "devices": devices,
            "slots": _amounts(result.capacity[agent_id], roles),
            "scaling": _amounts(result.scaling[agent_id], roles),
            "numa_nodes": list(result.numa_nodes.get(agent_id, ())),
        }
    return {
        "mode": result.mode.value,
        "agents": agents,
        "reserved": {
            "cpu": str(len(result.reservation.cpu)),
            "mem": str(result.reservation.mem),
        },
        "unassigned": {
            name: list(result.unassigned[DeviceName(name)])
            for name in display_order(result.unassigned, roles)
        },
        "warnings": [*result.warnings, *warnings],
    }
