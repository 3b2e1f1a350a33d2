"""One gather of every plugin's metrics: node, per-device, per-agent and per-workload figures."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from accelkit.metrics import Measurement, MetricType, NodeMetric, WorkloadMetric
from accelkit.types import AgentId, DeviceName, format_amount


@attrs.frozen
class AgentMetric:
    """A node metric seen from one agent: its devices' readings, or its scaled share."""

    agent_id: AgentId
    device_name: DeviceName
    key: str
    type: MetricType
    unit: str
    value: Measurement
    #: ``"devices"`` when read from the agent's devices, ``"scaled"`` when the node figure was
    #: multiplied by the agent's scaling factor
    basis: str


@attrs.frozen
class WorkloadSample:
    """A workload metric with the agent and plugin that gathered it."""

    agent_id: AgentId
    device_name: DeviceName
    metric: WorkloadMetric


def _agent_metrics(value: Iterable[AgentMetric]) -> tuple[AgentMetric, ...]:
    return tuple(value)


def _workload_samples(value: Iterable[WorkloadSample]) -> tuple[WorkloadSample, ...]:
    return tuple(value)


def _node(value: Mapping[Any, Any]) -> Mapping[DeviceName, tuple[NodeMetric, ...]]:
    return {DeviceName(k): tuple(v) for k, v in value.items()}


@attrs.frozen
class MetricsSnapshot:
    """Everything one gather found; ``errors`` names the plugins whose gather raised."""

    node: Mapping[DeviceName, tuple[NodeMetric, ...]] = attrs.field(factory=dict, converter=_node)
    agents: tuple[AgentMetric, ...] = attrs.field(default=(), converter=_agent_metrics)
    workloads: tuple[WorkloadSample, ...] = attrs.field(default=(), converter=_workload_samples)
    errors: Mapping[DeviceName, str] = attrs.field(factory=dict)

    def as_json(self) -> dict[str, Any]:
        """Plain JSON data; every amount is a decimal string, as ``accelkit metrics --json``."""
        agents: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for item in self.agents:
            entry = {**_head(item.key, item.type, item.unit, item.value), "basis": item.basis}
            agents.setdefault(item.agent_id, {}).setdefault(item.device_name, []).append(entry)
        workloads: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
        for sample in self.workloads:
            m = sample.metric
            per_agent = workloads.setdefault(sample.agent_id, {})
            per_workload = per_agent.setdefault(m.workload_id, {})
            per_workload.setdefault(sample.device_name, []).append(
                _head(m.key, m.type, m.unit, m.value)
            )
        return {
            "node": {key: [_node_json(m) for m in metrics] for key, metrics in self.node.items()},
            "agents": agents,
            "workloads": workloads,
            "errors": dict(self.errors),
        }


def measurement_json(reading: Measurement) -> dict[str, str | None]:
    """A reading as ``{"value": "…", "capacity": "…" | null}``."""
    capacity = None if reading.capacity is None else format_amount(reading.capacity)
    return {"value": format_amount(reading.value), "capacity": capacity}


def _head(key: str, kind: MetricType, unit: str, reading: Measurement) -> dict[str, Any]:
    return {"key": key, "type": str(kind), "unit": unit, **measurement_json(reading)}


def _node_json(metric: NodeMetric) -> dict[str, Any]:
    """The node figure, ``per_device``, the declared ``aggregate`` and, where the plugin gives
    any, ``per_parent`` (GPUs with MIG mode on)."""
    per_device = {d: measurement_json(r) for d, r in metric.per_device.items()}
    found = {**_head(metric.key, metric.type, metric.unit, metric.node), "per_device": per_device}
    found["aggregate"] = str(metric.adds_up_by)
    if metric.per_parent:
        found["per_parent"] = {d: measurement_json(r) for d, r in metric.per_parent.items()}
    return found
