"""The Prometheus text exposition of a metrics snapshot, through prometheus-client.

Names follow Prometheus' conventions: ``accelkit_<plugin>_<level>_<key>_<base unit>``, with
``node``, ``device``, ``agent`` or ``workload`` as the level, so that one family never mixes
levels (a ``sum()`` never counts a device twice) and no metric key can make its family collide
with another level's. Values are in base units (:data:`BASE_UNITS`): bytes, seconds, watts,
joules, degrees Celsius, hertz; utilisations are ratios from 0 to 1 (a utilisation measured
against a capacity is divided by it, so a node of 8 cores busy at 350 % reads 0.4375).
Accumulations are counters (``…_total``); every other type is a gauge. Readings with a capacity
also export ``accelkit_<plugin>_<level>_<key>_capacity_<unit>`` (utilisations do not: the
capacity of a ratio is 1).

Labels, the same words as every other accelkit family: ``plugin`` always, then ``device``,
``agent`` and ``workload`` as the level has them. Device series also carry the labels DCGM
exporter users join on, from the device's discovery record (:func:`device_labels`): ``gpu``,
``UUID``, ``pci_bus_id``, ``serial``, ``model_name`` and, for MIG instances, ``GPU_I_PROFILE``
and ``GPU_I_ID`` (``promtool check metrics`` accepts all of them). A GPU with MIG mode on is
no device, but its readings (power, temperature) are exported per GPU at the ``device`` level,
with the GPU's own labels and its id as ``device``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from accelkit.metrics import METRIC_UNITS, BaseUnit, Measurement, MetricType
from accelkit.metrics_export.snapshot import MetricsSnapshot
from accelkit.types import ComputeDevice, DeviceId

__all__ = [
    "BASE_UNITS",
    "BaseUnit",
    "DeviceLabels",
    "SnapshotCollector",
    "base_unit",
    "device_labels",
    "families",
    "family_name",
    "labels_of_devices",
]

log = logging.getLogger(__name__)

PREFIX = "accelkit"
LEVELS = ("node", "device", "agent", "workload")
_INVALID = re.compile(r"[^a-zA-Z0-9]+")

#: the labels of a MIG instance that its GPU (the parent) does not have
MIG_LABELS = frozenset({"GPU_I_PROFILE", "GPU_I_ID"})

#: labels per plugin, then per device id (and per parent id: a GPU with MIG mode on)
DeviceLabels = Mapping[str, Mapping[DeviceId, Mapping[str, str]]]


#: plugin units and the base unit each is exported in (the table of :mod:`accelkit.metrics`)
BASE_UNITS: Mapping[str, BaseUnit] = METRIC_UNITS


def base_unit(unit: str, kind: MetricType = MetricType.GAUGE) -> BaseUnit:
    """The base unit of ``unit``; a utilisation is always a ratio, an unknown unit kept as is."""
    if kind is MetricType.UTILIZATION:
        known = BASE_UNITS.get(unit)
        return known if known is not None and known.suffix == "ratio" else BASE_UNITS["percent"]
    if (known := BASE_UNITS.get(unit)) is not None:
        return known
    return BaseUnit(_clean(unit.lower().replace("%", "percent").replace("/", "_per_")))


def family_name(
    device_name: str,
    key: str,
    unit: str,
    level: str = "node",
    kind: MetricType = MetricType.GAUGE,
    *,
    capacity: bool = False,
) -> str:
    """``accelkit_cuda_device_mem_used_bytes`` for level ``device``, key ``mem_used``.

    A counter's samples add ``_total`` to this name (prometheus-client does).
    """
    suffix = base_unit(unit, kind).suffix
    stem = _clean(key)
    if suffix and stem.endswith(f"_{suffix}"):
        stem = stem.removesuffix(f"_{suffix}")
    parts = [PREFIX, _clean(device_name), level, stem, "capacity" if capacity else "", suffix]
    return "_".join(p for p in parts if p)


def _clean(text: str) -> str:
    """Letters, digits and single underscores only, as Prometheus names want."""
    return _INVALID.sub("_", text).strip("_")


def _number(value: Decimal) -> float:
    # prometheus-client only takes floats: the one place an amount becomes a float.
    return float(value)


def device_labels(device: ComputeDevice) -> dict[str, str]:
    """The DCGM-exporter labels of one device, where its discovery record has them.

    ``gpu`` is the NVML index, ``UUID`` the GPU's (for a MIG instance, its parent's, as DCGM
    exporter labels it), ``pci_bus_id`` NVML's form, ``serial`` the board's serial number
    (where the board has one), ``model_name`` the product name (DCGM's ``modelName`` is no
    snake_case, which ``promtool`` reports). A device
    without a UUID (a CPU core, memory) gets none: the labels are those of GPUs.
    """
    extra = device.extra
    labels: dict[str, str] = {}
    if not device.uuid:
        return labels
    if "index" in extra:
        labels["gpu"] = extra["index"]
    uuid = extra.get("parent_uuid") or device.uuid
    if uuid:
        labels["UUID"] = uuid
    if "pci_bus_id" in extra:
        labels["pci_bus_id"] = extra["pci_bus_id"]
    if extra.get("serial"):
        labels["serial"] = extra["serial"]
    model = extra.get("parent_model") or device.model_name
    if model:
        labels["model_name"] = model
    if extra.get("mig_profile"):
        labels["GPU_I_PROFILE"] = extra["mig_profile"]
        labels["GPU_I_ID"] = extra.get("gpu_instance_id", "")
    return labels


def labels_of_devices(devices: Mapping[str, Sequence[ComputeDevice]]) -> DeviceLabels:
    """:func:`device_labels` of every device, by plugin and device id; a MIG instance's GPU
    (its ``parent_id``) gets the instance's labels but its own ``GPU_I_…`` ones."""
    out: dict[str, dict[DeviceId, Mapping[str, str]]] = {}
    for name, found in devices.items():
        labels: dict[DeviceId, Mapping[str, str]] = {}
        for d in found:
            labels[d.device_id] = own = device_labels(d)
            parent = DeviceId(d.extra.get("parent_id", ""))
            if parent and parent not in labels:
                labels[parent] = {k: v for k, v in own.items() if k not in MIG_LABELS}
        out[str(name)] = labels
    return out


class _Families:
    """Families by name, created on first use, in the order they were first seen."""

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}
        self._origin: dict[str, tuple[str, ...]] = {}

    def add(
        self,
        origin: tuple[str, str, str, str],
        kind: MetricType,
        labels: Mapping[str, str],
        reading: Measurement,
    ) -> None:
        device_name, level, key, unit = origin
        unit_of = base_unit(unit, kind)
        name = family_name(device_name, key, unit, level, kind)
        doc = _doc(device_name, key, kind, unit_of.suffix, level)
        if kind is MetricType.UTILIZATION:
            value = reading.value / reading.capacity if reading.capacity else reading.value
            family = self._family(name, origin, doc, counter=False)
            if family is not None:
                factor = 1 if reading.capacity else unit_of.factor
                family.add_sample(name, dict(labels), _number(value * factor))
            return
        counter = kind is MetricType.ACCUMULATION
        family = self._family(name, origin, doc, counter=counter)
        if family is not None:
            sample = f"{family.name}_total" if counter else family.name
            family.add_sample(sample, dict(labels), _number(reading.value * unit_of.factor))
        if reading.capacity is not None:
            name = family_name(device_name, key, unit, level, kind, capacity=True)
            capacity = self._family(name, origin, f"capacity of {doc}", counter=False)
            if capacity is not None:
                value = reading.capacity * unit_of.factor
                capacity.add_sample(capacity.name, dict(labels), _number(value))

    def _family(
        self, name: str, origin: tuple[str, ...], doc: str, *, counter: bool
    ) -> Metric | None:
        """The family ``name``; ``None`` (logged) when another metric already claimed it."""
        family = self._by_name.get(name)
        if family is None:
            family = CounterMetricFamily(name, doc) if counter else GaugeMetricFamily(name, doc)
            self._by_name[name] = family
            self._origin[name] = origin
        elif self._origin[name] != origin:
            log.warning(
                "metrics: %s of %s is left out: its family %s is that of %s",
                origin[2],
                origin[0],
                name,
                "/".join(self._origin[name]),
            )
            return None
        return family

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._by_name.values())


def _doc(device_name: str, key: str, kind: MetricType, unit: str, level: str) -> str:
    return f"{key} of the {device_name} plugin, per {level} ({kind}, {unit or 'no unit'})"


def families(snapshot: MetricsSnapshot, labels: DeviceLabels | None = None) -> list[Metric]:
    """Every family of ``snapshot``, ready for a registry to expose.

    ``labels`` adds labels to each device's series (:func:`labels_of_devices`).
    """
    out = _Families()
    extra = labels or {}
    for device_name, metrics in snapshot.node.items():
        base = {"plugin": str(device_name)}
        known = extra.get(str(device_name), {})
        for m in metrics:
            out.add((device_name, "node", m.key, m.unit), m.type, base, m.node)
            per_device = [*m.per_device.items(), *m.per_parent.items()]
            for device_id, reading in per_device:
                series = {**base, "device": device_id, **known.get(DeviceId(device_id), {})}
                out.add((device_name, "device", m.key, m.unit), m.type, series, reading)
    for a in snapshot.agents:
        series = {"plugin": a.device_name, "agent": a.agent_id}
        out.add((a.device_name, "agent", a.key, a.unit), a.type, series, a.value)
    for w in snapshot.workloads:
        wm = w.metric
        series = {"plugin": w.device_name, "agent": w.agent_id, "workload": wm.workload_id}
        out.add((w.device_name, "workload", wm.key, wm.unit), wm.type, series, wm.value)
    return list(out)


class SnapshotCollector(Collector):
    """A prometheus-client collector that exposes a fresh snapshot on every scrape.

    ``devices``, when given, returns the node's devices per plugin; their DCGM labels go on
    every device series.
    """

    def __init__(
        self,
        source: Callable[[], MetricsSnapshot],
        devices: Callable[[], Mapping[str, Iterable[ComputeDevice]]] | None = None,
    ) -> None:
        self._source = source
        self._devices = devices

    def collect(self) -> Iterator[Metric]:
        labels = None
        if self._devices is not None:
            labels = labels_of_devices({k: list(v) for k, v in self._devices().items()})
        yield from families(self._source(), labels)
