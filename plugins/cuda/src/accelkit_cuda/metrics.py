"""GPU readings turned into accelkit metrics.

Each device is read in one go; an NVML error on a device (a lost GPU, most often) skips that
device's readings and is logged, and the other devices are still reported. A reading a device
does not offer (MIG instances have no utilisation, power, temperature or clock) is simply
absent. The power and temperature of a GPU with MIG mode on, which is not a device itself, are
reported per GPU (``per_parent``) and count in the node figures. Each metric says how an
agent's devices add up: memory and power are summed, utilisations and clocks averaged, and the
temperature is the hottest device's. Units are NVML's own: percent, bytes, milliwatts, degrees
Celsius and MHz, all integers (the Prometheus exposition converts them to base units).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal

import attrs

from accelkit import Aggregate, Measurement, MetricType, NodeMetric
from accelkit.types import DeviceId
from accelkit_cuda.nvml import Handle
from accelkit_cuda.nvml.readings import MemoryInfo, NVMLProcesses, NVMLReadings

log = logging.getLogger(__name__)

_PERCENT = Decimal(100)


@attrs.frozen
class DeviceReading:
    """Everything read from one device at one time; ``None`` where the device offers nothing."""

    memory: MemoryInfo
    gpu_util: int | None = None
    mem_util: int | None = None
    power: int | None = None
    power_limit: int | None = None
    temperature: int | None = None
    sm_clock: int | None = None


def read_device(lib: NVMLReadings, handle: Handle) -> DeviceReading:
    """Read one device; raises the NVML error of a device that cannot be read."""
    utilization = lib.utilization(handle)
    return DeviceReading(
        memory=lib.memory(handle),
        gpu_util=None if utilization is None else utilization[0],
        mem_util=None if utilization is None else utilization[1],
        power=lib.power_usage(handle),
        power_limit=lib.power_limit(handle),
        temperature=lib.temperature(handle),
        sm_clock=lib.sm_clock(handle),
    )


def read_devices(
    lib: NVMLReadings, handles: Mapping[DeviceId, Handle]
) -> dict[DeviceId, DeviceReading]:
    """Read every device; a device whose NVML calls fail is logged and left out."""
    readings: dict[DeviceId, DeviceReading] = {}
    for device_id, handle in handles.items():
        try:
            readings[device_id] = read_device(lib, handle)
        except lib.error_type as exc:
            log.warning("cuda: no metrics from %s: NVML error: %s", device_id, exc)
    return readings


def _metric(
    key: str,
    kind: MetricType,
    unit: str,
    per_device: Mapping[DeviceId, Measurement],
    aggregate: Aggregate,
    *,
    parents: Mapping[DeviceId, Measurement] | None = None,
) -> list[NodeMetric]:
    """One metric; ``parents`` (GPUs that are not devices) count in the node figure too."""
    also = parents or {}
    if not per_device and not also:
        return []
    node = _NODE[aggregate]([*per_device.values(), *also.values()])
    by_id = {str(device_id): m for device_id, m in per_device.items()}
    return [NodeMetric(key, kind, unit, node, by_id, aggregate, dict(also))]


def _mean(values: Sequence[Measurement]) -> Measurement:
    capacity = values[0].capacity if all(m.capacity == _PERCENT for m in values) else None
    return Measurement(sum((m.value for m in values), Decimal(0)) / len(values), capacity)


def _total(values: Sequence[Measurement]) -> Measurement:
    capacities = [m.capacity for m in values]
    capacity = None if None in capacities else sum((c or 0 for c in capacities), Decimal(0))
    return Measurement(sum((m.value for m in values), Decimal(0)), capacity)


def _hottest(values: Sequence[Measurement]) -> Measurement:
    return Measurement(max(m.value for m in values))


_NODE: Mapping[Aggregate, Callable[[Sequence[Measurement]], Measurement]] = {
    Aggregate.MEAN: _mean,
    Aggregate.SUM: _total,
    Aggregate.MAX: _hottest,
}


def node_metrics(
    readings: Mapping[DeviceId, DeviceReading],
    mig_parents: Mapping[DeviceId, DeviceReading] | None = None,
) -> list[NodeMetric]:
    """``gpu_util``, ``mem_util``, ``mem_used``, ``power``, ``temperature`` and ``sm_clock``
    per device.

    The node value is the mean of the utilisations and clocks, the sum of memory and power
    (against the sum of totals and limits), and the hottest device's temperature; the power
    and temperature of ``mig_parents`` (GPUs with MIG mode on, by id) are reported per GPU and
    count in the node's.
    """
    items = readings.items()
    parents = (mig_parents or {}).items()
    gpu = {d: Measurement(r.gpu_util, _PERCENT) for d, r in items if r.gpu_util is not None}
    mem = {d: Measurement(r.mem_util, _PERCENT) for d, r in items if r.mem_util is not None}
    used = {d: Measurement(r.memory.used, r.memory.total) for d, r in items}
    power = {d: Measurement(r.power, r.power_limit) for d, r in items if r.power is not None}
    temp = {d: Measurement(r.temperature) for d, r in items if r.temperature is not None}
    clock = {d: Measurement(r.sm_clock) for d, r in items if r.sm_clock is not None}
    gpu_power = {d: Measurement(r.power, r.power_limit) for d, r in parents if r.power is not None}
    gpu_temp = {d: Measurement(r.temperature) for d, r in parents if r.temperature is not None}
    return [
        *_metric("gpu_util", MetricType.UTILIZATION, "percent", gpu, Aggregate.MEAN),
        *_metric("mem_util", MetricType.UTILIZATION, "percent", mem, Aggregate.MEAN),
        *_metric("mem_used", MetricType.GAUGE, "bytes", used, Aggregate.SUM),
        *_metric("power", MetricType.GAUGE, "mW", power, Aggregate.SUM, parents=gpu_power),
        *_metric("temperature", MetricType.GAUGE, "celsius", temp, Aggregate.MAX, parents=gpu_temp),
        *_metric("sm_clock", MetricType.GAUGE, "MHz", clock, Aggregate.MEAN),
    ]


def process_memory(lib: NVMLProcesses, handles: Mapping[DeviceId, Handle]) -> dict[int, int]:
    """GPU memory in use per pid, summed over the devices; a failing device is left out."""
    usage: dict[int, int] = {}
    for device_id, handle in handles.items():
        try:
            processes = lib.running(handle)
        except lib.error_type as exc:
            log.warning("cuda: no process list from %s: NVML error: %s", device_id, exc)
            continue
        for process in processes:
            usage[process.pid] = usage.get(process.pid, 0) + (process.used_memory or 0)
    return usage


def memory_of(usage: Mapping[int, int], pids: Iterable[int]) -> int:
    """Total GPU memory of ``pids``; 0 when none of them uses a GPU."""
    return sum(usage.get(pid, 0) for pid in set(pids))
