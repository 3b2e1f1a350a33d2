"""GPU-style readings for a mock kind, as the cuda plugin reports them (``gpu-metrics = true``).

With ``[plugins.config.mock] gpu-metrics = true`` every accelerator kind also plays the cuda
plugin's metrics (``gpu_util``, ``mem_util``, ``mem_used``, ``power``, ``temperature``,
``sm_clock``, in NVML's units and with the same per-agent aggregation) and its devices carry the
identity NVML gives a GPU (``index``, ``pci_bus_id``; a MIG-like device, one with a ``parent``,
its parent's index and UUID, ``mig_profile`` and ``gpu_instance_id``), so dashboards and
queries written for GPUs can be tried on a node without one. A device with a ``parent`` has no
utilisation, power, temperature or clock of its own; its parent GPU's power and temperature are
reported per GPU, as the cuda plugin reports a GPU with MIG mode on. Readings are a function of
the device id and the time only, like the kind's ``utilization``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal

from accelkit import Aggregate, Measurement, MetricType, NodeMetric
from accelkit.types import DeviceId
from accelkit_mock.spec import MockDevice

__all__ = ["gpu_extra", "gpu_metrics"]

#: a played GPU's memory when its declaration gives none (bytes)
PLAYED_MEMORY = 16 * 2**30
#: a played GPU's power limit (mW)
POWER_LIMIT = 300_000

Percent = Callable[[str], int]


def _gpus(devices: Sequence[MockDevice]) -> list[str]:
    """The ids of the played GPUs, in order: whole devices and the parents of MIG-like ones."""
    found: list[str] = []
    for d in devices:
        gpu = d.parent or d.id
        if gpu not in found:
            found.append(gpu)
    return found


def gpu_extra(key: str, devices: Sequence[MockDevice]) -> dict[str, dict[str, str]]:
    """The NVML-style identity of each device, by id (``uuid`` is ``MOCK-<key>-<id>``)."""
    index = {gpu: i for i, gpu in enumerate(_gpus(devices))}
    extra: dict[str, dict[str, str]] = {}
    instances: dict[str, int] = {}
    for d in devices:
        gpu = d.parent or d.id
        found = {"index": str(index[gpu]), "pci_bus_id": f"00000000:{0x10 + index[gpu]:02X}:00.0"}
        if d.parent:
            instances[gpu] = instances.get(gpu, 0) + 1
            found |= {
                "parent_uuid": f"MOCK-{key}-{gpu}",
                "gpu_instance_id": str(instances[gpu]),
                "mig_profile": d.mig_profile or "1g.5gb",
            }
        extra[d.id] = found
    return extra


def gpu_metrics(devices: Sequence[MockDevice], percent: Percent) -> list[NodeMetric]:
    """The cuda plugin's metrics, played: ``percent(id)`` gives a reading in 0..100."""
    whole = [d for d in devices if not d.parent]
    parents = [gpu for gpu in _gpus(devices) if gpu not in {d.id for d in whole}]
    hundred = Decimal(100)

    def each(ids: Sequence[str], read: Callable[[int], Measurement]) -> dict[str, Measurement]:
        return {i: read(percent(i)) for i in ids}

    ids = [d.id for d in whole]
    util = each(ids, lambda p: Measurement(p, hundred))
    copy = each(ids, lambda p: Measurement(p // 2, hundred))
    power = each(ids, lambda p: Measurement(60_000 + p * 2_000, POWER_LIMIT))
    temp = each(ids, lambda p: Measurement(30 + p // 2))
    clock = each(ids, lambda p: Measurement(1_000 + p * 10))
    used = {
        d.id: Measurement(
            (d.memory or PLAYED_MEMORY) * percent(d.id) // 100, d.memory or PLAYED_MEMORY
        )
        for d in devices
    }
    gpu_power = each(parents, lambda p: Measurement(60_000 + p * 2_000, POWER_LIMIT))
    gpu_temp = each(parents, lambda p: Measurement(30 + p // 2))
    return [
        m
        for m in (
            _metric("gpu_util", MetricType.UTILIZATION, "percent", util, Aggregate.MEAN),
            _metric("mem_util", MetricType.UTILIZATION, "percent", copy, Aggregate.MEAN),
            _metric("mem_used", MetricType.GAUGE, "bytes", used, Aggregate.SUM),
            _metric("power", MetricType.GAUGE, "mW", power, Aggregate.SUM, parents=gpu_power),
            _metric(
                "temperature", MetricType.GAUGE, "celsius", temp, Aggregate.MAX, parents=gpu_temp
            ),
            _metric("sm_clock", MetricType.GAUGE, "MHz", clock, Aggregate.MEAN),
        )
        if m is not None
    ]


def _metric(
    key: str,
    kind: MetricType,
    unit: str,
    per_device: Mapping[str, Measurement],
    aggregate: Aggregate,
    *,
    parents: Mapping[str, Measurement] | None = None,
) -> NodeMetric | None:
    readings = [*per_device.values(), *(parents or {}).values()]
    if not readings:
        return None
    values = [r.value for r in readings]
    capacities = [r.capacity for r in readings]
    if aggregate is Aggregate.MAX:
        node = Measurement(max(values))
    elif aggregate is Aggregate.MEAN:
        mean = sum(values, Decimal(0)) / len(values)
        node = Measurement(mean, capacities[0] if kind is MetricType.UTILIZATION else None)
    else:
        total = None if None in capacities else sum((c or 0 for c in capacities), Decimal(0))
        node = Measurement(sum(values, Decimal(0)), total)
    by_id = {DeviceId(k): v for k, v in per_device.items()}
    return NodeMetric(key, kind, unit, node, by_id, aggregate, dict(parents or {}))
