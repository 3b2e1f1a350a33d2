"""What the node keeps for itself before the agents get anything (``reserved-cpu/mem``)."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

import attrs

from accelkit.config.model import ResourceConfig
from accelkit.errors import ConfigError
from accelkit.partition.model import GlobalDeviceMap, provider
from accelkit.partition.ordering import natural_sort_key
from accelkit.partition.problems import listing
from accelkit.plugin import PluginRole
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.sizes import format_binary_size
from accelkit.types import DeviceId


def _device_ids(value: Iterable[str]) -> tuple[DeviceId, ...]:
    return tuple(DeviceId(v) for v in value)


@attrs.frozen(repr=False)
class Reservation:
    """The cpu cores and bytes of memory no agent gets.

    ``cpu`` are device ids of the cores plugin (role ``CORES``), ``mem`` bytes of the memory
    plugin (role ``MEMORY``). Only what the node really has is reserved: without a cores
    plugin no core is reserved, without a memory plugin no memory.
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    cpu: tuple[DeviceId, ...] = attrs.field(default=(), converter=_device_ids)
    mem: int = 0


def reserve(
    device_map: GlobalDeviceMap, resource: ResourceConfig, source: str
) -> tuple[Reservation, list[ConfigError]]:
    """The reservation ``resource`` asks for on this node, and the problems with it.

    ``reserved-cpu`` comes off the plugin playing :attr:`PluginRole.CORES`, ``reserved-mem``
    off the one playing :attr:`PluginRole.MEMORY`. A count reserves the lowest-numbered cores
    in natural order; a list names the cores. Asking for more cores or memory than the node
    has, or for all of it, is a problem.
    """
    errors: list[ConfigError] = []
    cpu: tuple[DeviceId, ...] = ()
    if (cores_name := provider(device_map, PluginRole.CORES)) is not None:
        cores = sorted(device_map[cores_name].device_ids, key=natural_sort_key)
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
    if (memory_name := provider(device_map, PluginRole.MEMORY)) is not None:
        memory = device_map[memory_name]
        total = sum((i.amount for i in memory.device_slots.values()), Decimal(0))
        if total and resource.reserved_mem >= total:
            msg = (
                f"reserves {format_binary_size(resource.reserved_mem)} of memory but the node "
                f"has {format_binary_size(int(total))}, leaving none for the agents"
            )
            errors.append(ConfigError(msg, file=source, key="resource.reserved-mem"))
        else:
            mem = min(resource.reserved_mem, int(total))
    return Reservation(cpu, mem), errors
