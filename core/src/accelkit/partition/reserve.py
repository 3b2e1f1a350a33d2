"""What the node keeps for itself before the agents get anything (``reserved-cpu/mem``)."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

import attrs

from accelkit.config.model import ResourceConfig
from accelkit.errors import ConfigError
from accelkit.partition.model import GlobalDeviceMap
from accelkit.partition.ordering import natural_sort_key
from accelkit.partition.problems import listing
from accelkit.sizes import format_binary_size
from accelkit.types import DeviceId, DeviceName

CPU = DeviceName("cpu")
MEM = DeviceName("mem")


def _device_ids(value: Iterable[str]) -> tuple[DeviceId, ...]:
    return tuple(DeviceId(v) for v in value)


@attrs.frozen
class Reservation:
    """The cpu cores and bytes of memory no agent gets.

    Only what the node really has is reserved: without a ``cpu`` plugin no core is reserved,
    without a ``mem`` plugin no memory.
    """

    cpu: tuple[DeviceId, ...] = attrs.field(default=(), converter=_device_ids)
    mem: int = 0


def reserve(
    device_map: GlobalDeviceMap, resource: ResourceConfig, source: str
) -> tuple[Reservation, list[ConfigError]]:
    """The reservation ``resource`` asks for on this node, and the problems with it.

    A count reserves the lowest-numbered cores in natural order; a list names the cores. Asking
    for more cores or memory than the node has, or for all of it, is a problem.
    """
    errors: list[ConfigError] = []
    cpu: tuple[DeviceId, ...] = ()
    if (cpu_info := device_map.get(CPU)) is not None:
        cores = sorted(cpu_info.device_ids, key=natural_sort_key)
        wanted = resource.reserved_cpu
        if isinstance(wanted, int):
            if wanted >= len(cores) and cores:
                msg = (
                    f"reserves {wanted} cpu core(s) but the node has {len(cores)}, "
                    "leaving none for the agents"
                )
                errors.append(ConfigError(msg, file=source, key="resource.reserved-cpu"))
            else:
                cpu = tuple(cores[:wanted])
        else:
            known = set(cores)
            if unknown := [c for c in wanted if c not in known]:
                msg = f"unknown cpu core id(s) {listing(unknown)} (the node has {listing(cores)})"
                errors.append(ConfigError(msg, file=source, key="resource.reserved-cpu"))
            elif len(set(wanted)) >= len(cores) and cores:
                msg = f"reserves all {len(cores)} cpu core(s), leaving none for the agents"
                errors.append(ConfigError(msg, file=source, key="resource.reserved-cpu"))
            else:
                cpu = tuple(sorted({DeviceId(c) for c in wanted}, key=natural_sort_key))
    mem = 0
    if (mem_info := device_map.get(MEM)) is not None:
        total = sum((i.amount for i in mem_info.device_slots.values()), Decimal(0))
        if total and resource.reserved_mem >= total:
            msg = (
                f"reserves {format_binary_size(resource.reserved_mem)} of memory but the node "
                f"has {format_binary_size(int(total))}, leaving none for the agents"
            )
            errors.append(ConfigError(msg, file=source, key="resource.reserved-mem"))
        else:
            mem = min(resource.reserved_mem, int(total))
    return Reservation(cpu, mem), errors
