"""The serialisable partition plan that ``accelkit plan`` prints (DESIGN §12)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from accelkit.health import DeviceHealth, HealthState
from accelkit.partition import natural_sort_key
from accelkit.partition.partitioner import PartitionResult
from accelkit.types import DeviceId, DeviceName, SlotName, format_amount

_FIRST = {"cpu": 0, "mem": 1}


def display_order(keys: Iterable[str]) -> list[str]:
    """``cpu``, ``mem``, then the accelerators in natural order."""
    return sorted(keys, key=lambda k: (_FIRST.get(k.split(".", 1)[0], 2), natural_sort_key(k)))


def _amounts(values: Mapping[SlotName, Any]) -> dict[str, str]:
    return {slot: format_amount(values[SlotName(slot)]) for slot in display_order(values)}


def health_warnings(health: Mapping[DeviceName, Mapping[DeviceId, DeviceHealth]]) -> list[str]:
    """A warning per device that takes no new grant (unhealthy or cordoned) or is degraded."""
    lines: list[str] = []
    for plugin in display_order(health):
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
    agents: dict[str, Any] = {}
    for agent_id, parts in result.assignments.items():
        devices = {
            name: sorted(parts[DeviceName(name)].device_ids, key=natural_sort_key)
            for name in display_order(parts)
        }
        agents[agent_id] = {
            "devices": devices,
            "slots": _amounts(result.capacity[agent_id]),
            "scaling": _amounts(result.scaling[agent_id]),
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
            for name in display_order(result.unassigned)
        },
        "warnings": [*result.warnings, *warnings],
    }
