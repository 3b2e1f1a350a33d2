"""The Prometheus text exposition of a metrics snapshot, through prometheus-client.

Families are named ``accelkit_<plugin>_<key>_<unit>`` for node figures, with ``device_``,
``agent_`` or ``workload_`` before the key for per-device, per-agent and per-workload figures,
so that one family never mixes levels and a ``sum()`` never counts a device twice. Readings
with a capacity also export ``…_capacity``. Accumulations are counters (``…_total``); every other
type is a gauge. Labels: ``device_name`` always, then ``device_id``, ``agent_id`` and
``workload_id`` as the level has them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from accelkit.metrics import Measurement, MetricType
from accelkit.metrics_export.snapshot import MetricsSnapshot

PREFIX = "accelkit"
_INVALID = re.compile(r"[^a-zA-Z0-9]+")


def family_name(device_name: str, key: str, unit: str, level: str = "") -> str:
    """``accelkit_cuda_device_memory_used_bytes`` for level ``device``, key ``memory_used``."""
    suffix = _clean(unit.lower().replace("%", "percent").replace("/", "_per_"))
    parts = [PREFIX, _clean(device_name), level, _clean(key)]
    if suffix and not key.endswith(suffix):
        parts.append(suffix)
    return "_".join(p for p in parts if p)


def _clean(text: str) -> str:
    """Letters, digits and single underscores only, as Prometheus names want."""
    return _INVALID.sub("_", text).strip("_")


def _number(value: Decimal) -> float:
    # prometheus-client only takes floats: the one place an amount becomes a float.
    return float(value)


class _Families:
    """Families by name, created on first use, in the order they were first seen."""

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}

    def add(
        self, name: str, kind: MetricType, doc: str, labels: Mapping[str, str], reading: Measurement
    ) -> None:
        counter = kind is MetricType.ACCUMULATION
        family = self._family(name, doc, counter=counter)
        sample = f"{family.name}_total" if counter else family.name
        family.add_sample(sample, dict(labels), _number(reading.value))
        if reading.capacity is not None:
            capacity = self._family(f"{name}_capacity", f"capacity of {doc}", counter=False)
            capacity.add_sample(capacity.name, dict(labels), _number(reading.capacity))

    def _family(self, name: str, doc: str, *, counter: bool) -> Metric:
        family = self._by_name.get(name)
        if family is None:
            family = CounterMetricFamily(name, doc) if counter else GaugeMetricFamily(name, doc)
            self._by_name[name] = family
        return family

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._by_name.values())


def _doc(device_name: str, key: str, kind: MetricType, unit: str, level: str = "") -> str:
    per = f", per {level}" if level else ""
    return f"{key} of the {device_name} plugin ({kind}, {unit or 'no unit'}){per}"


def families(snapshot: MetricsSnapshot) -> list[Metric]:
    """Every family of ``snapshot``, ready for a registry to expose."""
    out = _Families()
    for device_name, metrics in snapshot.node.items():
        for m in metrics:
            base = {"device_name": str(device_name)}
            doc = _doc(device_name, m.key, m.type, m.unit)
            out.add(family_name(device_name, m.key, m.unit), m.type, doc, base, m.node)
            name = family_name(device_name, m.key, m.unit, "device")
            doc = _doc(device_name, m.key, m.type, m.unit, "device")
            for device_id, reading in m.per_device.items():
                out.add(name, m.type, doc, {**base, "device_id": device_id}, reading)
    for a in snapshot.agents:
        labels = {"device_name": a.device_name, "agent_id": a.agent_id}
        doc = _doc(a.device_name, a.key, a.type, a.unit, "agent")
        out.add(family_name(a.device_name, a.key, a.unit, "agent"), a.type, doc, labels, a.value)
    for w in snapshot.workloads:
        wm = w.metric
        labels = {"device_name": w.device_name, "agent_id": w.agent_id}
        labels["workload_id"] = wm.workload_id
        name = family_name(w.device_name, wm.key, wm.unit, "workload")
        doc = _doc(w.device_name, wm.key, wm.type, wm.unit, "workload")
        out.add(name, wm.type, doc, labels, wm.value)
    return list(out)


class SnapshotCollector(Collector):
    """A prometheus-client collector that exposes a fresh snapshot on every scrape."""

    def __init__(self, source: Callable[[], MetricsSnapshot]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        yield from families(self._source())
