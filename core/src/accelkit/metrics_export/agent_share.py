"""An agent's figure of a node metric (DESIGN §6 scaling factors, §10 metrics).

When a plugin hands out whole devices (cpu cores, accelerators) and reports per-device readings,
an agent's figure comes from its own devices' readings. When the plugin splits its capacity by
amount (memory), or reports no reading for the agent's devices, the node figure is multiplied by
the agent's scaling factor. A utilisation is a share already and is never scaled.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from decimal import Decimal

from accelkit.metrics import Aggregate, Measurement, MetricType, NodeMetric, default_aggregate
from accelkit.partition import natural_sort_key
from accelkit.types import DeviceId, DeviceName, SlotName

BASIS_DEVICES = "devices"
BASIS_SCALED = "scaled"


def plugin_factor(key: DeviceName, scaling: Mapping[SlotName, Decimal]) -> Decimal | None:
    """The agent's scaling factor for plugin ``key``: that of its first slot in natural order."""
    name = str(key)
    slots = sorted(
        (s for s in scaling if s == name or s.startswith(f"{name}.")), key=natural_sort_key
    )
    return scaling[slots[0]] if slots else None


def agent_measurement(
    metric: NodeMetric,
    device_ids: Collection[DeviceId],
    factor: Decimal | None,
    *,
    shared_by_amount: bool,
) -> tuple[Measurement, str] | None:
    """The agent's reading of ``metric`` and how it was found, or ``None`` when it has none.

    An agent with none of the plugin's devices has none: the node's figure times a factor of 0
    would say "0 of 0", and a utilisation, never scaled, would be the other agents' load.
    """
    if not device_ids:
        return None
    readings = [metric.per_device[d] for d in device_ids if d in metric.per_device]
    if readings and not shared_by_amount:
        return combine(metric.type, readings, metric.adds_up_by), BASIS_DEVICES
    if factor is None:
        return None
    return scale(metric.type, metric.node, factor, metric.adds_up_by), BASIS_SCALED


def combine(
    kind: MetricType, readings: Sequence[Measurement], aggregate: Aggregate | None = None
) -> Measurement:
    """Several devices' readings as one, as the metric declares (:class:`Aggregate`): added up
    (capacities too), the largest (with its own capacity) or averaged; by default utilisations
    average and everything else adds up."""
    how = default_aggregate(kind) if aggregate is None else aggregate
    if how is Aggregate.MAX:
        return max(readings, key=lambda r: r.value)
    values = sum((r.value for r in readings), Decimal(0))
    capacities = [r.capacity for r in readings]
    capacity = None if None in capacities else sum((c for c in capacities if c), Decimal(0))
    if how is Aggregate.MEAN:
        count = len(readings)
        return Measurement(values / count, None if capacity is None else capacity / count)
    return Measurement(values, capacity)


def scale(
    kind: MetricType, reading: Measurement, factor: Decimal, aggregate: Aggregate | None = None
) -> Measurement:
    """The agent's share of a node reading. Only amounts that add up are scaled: utilisations
    are shares already, and a maximum or a mean (a temperature, a clock) is no amount."""
    how = default_aggregate(kind) if aggregate is None else aggregate
    if kind is MetricType.UTILIZATION or how is not Aggregate.SUM:
        return reading
    capacity = None if reading.capacity is None else reading.capacity * factor
    return Measurement(reading.value * factor, capacity)
