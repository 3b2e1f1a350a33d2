"""What makes the metrics a plugin gathers well formed (DESIGN §10)."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Sequence
from decimal import Decimal

from accelkit.metrics import (
    METRIC_UNITS,
    Aggregate,
    Measurement,
    MetricType,
    NodeMetric,
    ProcessMetric,
    WorkloadMetric,
)

#: the rule of :mod:`accelkit.metrics`, repeated so that a plugin bypassing attrs is caught too
_KEY = re.compile(r"[a-z][a-z0-9_]*")


def node_metric_problems(metrics: object, device_ids: Collection[str]) -> list[str]:
    """Problems of a ``gather_node_metrics`` result; ``device_ids`` are the plugin's devices."""
    items = _as_sequence(metrics, "gather_node_metrics()")
    if isinstance(items, str):
        return [items]
    problems = list(_common_problems(items, NodeMetric, "gather_node_metrics()"))
    for metric in items:
        if not isinstance(metric, NodeMetric):
            continue
        problems += _measurement_problems(metric.node, f"metric {metric.key!r} (node)")
        for device_id, reading in metric.per_device.items():
            if device_id not in device_ids:
                problems.append(
                    f"metric {metric.key!r} has a reading for {device_id!r}, which is not one "
                    f"of the plugin's devices ({sorted(device_ids)})"
                )
            problems += _measurement_problems(reading, f"metric {metric.key!r} of {device_id!r}")
        problems += _parent_problems(metric, device_ids)
    return problems


def _parent_problems(metric: NodeMetric, device_ids: Collection[str]) -> list[str]:
    """``aggregate`` is an :class:`Aggregate` or ``None``; ``per_parent`` names no device."""
    problems = []
    if metric.aggregate is not None and not isinstance(metric.aggregate, Aggregate):
        problems.append(f"metric {metric.key!r} must have an Aggregate (or None) as aggregate")
    for parent_id, reading in metric.per_parent.items():
        if parent_id in device_ids:
            problems.append(
                f"metric {metric.key!r} has a per_parent reading for {parent_id!r}, which is "
                "one of the plugin's devices: its reading belongs in per_device"
            )
        problems += _measurement_problems(reading, f"metric {metric.key!r} of {parent_id!r}")
    return problems


def workload_metric_problems(metrics: object, workload_id: str) -> list[str]:
    """Problems of a ``gather_workload_metrics`` result for the workload ``workload_id``."""
    items = _as_sequence(metrics, "gather_workload_metrics()")
    if isinstance(items, str):
        return [items]
    problems = list(_common_problems(items, WorkloadMetric, "gather_workload_metrics()"))
    for metric in items:
        if isinstance(metric, WorkloadMetric):
            if metric.workload_id != workload_id:
                problems.append(
                    f"metric {metric.key!r} names workload {metric.workload_id!r}, "
                    f"but it was gathered for {workload_id!r}"
                )
            problems += _measurement_problems(metric.value, f"metric {metric.key!r}")
    return problems


def process_metric_problems(metrics: object, pid: int) -> list[str]:
    """Problems of a ``gather_process_metrics`` result for process ``pid``."""
    items = _as_sequence(metrics, "gather_process_metrics()")
    if isinstance(items, str):
        return [items]
    problems = list(_common_problems(items, ProcessMetric, "gather_process_metrics()"))
    for metric in items:
        if isinstance(metric, ProcessMetric):
            if metric.pid != pid:
                problems.append(f"metric {metric.key!r} names pid {metric.pid}, not {pid}")
            problems += _measurement_problems(metric.value, f"metric {metric.key!r}")
    return problems


def _as_sequence(metrics: object, call: str) -> Sequence[object] | str:
    if isinstance(metrics, str) or not isinstance(metrics, Sequence):
        return f"{call} must return a sequence (a list or tuple), not {type(metrics).__name__}"
    return metrics


def _common_problems(items: Sequence[object], kind: type, call: str) -> Iterator[str]:
    seen: set[str] = set()
    for metric in items:
        if not isinstance(metric, kind):
            yield f"{call} returned a {type(metric).__name__}; it must return {kind.__name__}s"
            continue
        key = getattr(metric, "key", "")
        if key in seen:
            yield f"metric key {key!r} appears twice; keys must be unique within a plugin"
        seen.add(key)
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            yield f"metric key {key!r} must be lower-case letters, digits and '_' (no dots)"
        if not isinstance(getattr(metric, "type", None), MetricType):
            yield f"metric {key!r} must have a MetricType as its type"
        unit = getattr(metric, "unit", None)
        if unit not in METRIC_UNITS:
            yield (
                f"metric {key!r} is in {unit!r}, which is not in accelkit's unit table, so it "
                f"would be exported unconverted; use one of {', '.join(METRIC_UNITS)}"
            )


def _measurement_problems(reading: object, what: str) -> list[str]:
    if not isinstance(reading, Measurement):
        return [f"{what} must be a Measurement, not {type(reading).__name__}"]
    problems = []
    for name, value in (("value", reading.value), ("capacity", reading.capacity)):
        if value is None and name == "capacity":
            continue
        if not isinstance(value, Decimal) or not value.is_finite():
            problems.append(f"{what}: the {name} must be a finite Decimal, got {value!r}")
    return problems
