"""Metric value types shared by every plugin (DESIGN §10)."""

from __future__ import annotations

import enum
import re
import time
from collections.abc import Hashable, Mapping
from decimal import Decimal
from typing import Any

import attrs

from accelkit.types import DeviceId, to_decimal

__all__ = [
    "METRIC_UNITS",
    "Aggregate",
    "BaseUnit",
    "Measurement",
    "MetricContext",
    "MetricType",
    "NodeMetric",
    "ProcessMetric",
    "WorkloadMetric",
]

_KEY = re.compile(r"[a-z][a-z0-9_]*")


class MetricType(enum.StrEnum):
    """How a metric's values behave over time."""

    GAUGE = "gauge"  # a level: memory used, temperature
    UTILIZATION = "utilization"  # a share of capacity over an interval
    ACCUMULATION = "accumulation"  # a counter that only grows: cpu seconds, bytes sent
    RATE = "rate"  # a change per second


class Aggregate(enum.StrEnum):
    """How a metric's readings of several devices add up to one figure (an agent's)."""

    SUM = "sum"  # memory used, power: the devices' readings added up
    MAX = "max"  # temperature: the hottest device
    MEAN = "mean"  # utilisation, clock: the devices' average


def default_aggregate(kind: MetricType) -> Aggregate:
    """What a metric that declares nothing adds up with: utilisations average, others add."""
    return Aggregate.MEAN if kind is MetricType.UTILIZATION else Aggregate.SUM


def _check_key(_inst: object, _attribute: attrs.Attribute[str], value: str) -> None:
    if not _KEY.fullmatch(value):
        msg = f"metric key {value!r} must be lower-case letters, digits and '_' (no dots)"
        raise ValueError(msg)


def _optional_decimal(value: Any) -> Decimal | None:
    return None if value is None else to_decimal(value)


@attrs.frozen
class Measurement:
    """One reading, with the capacity it is measured against where there is one."""

    value: Decimal = attrs.field(converter=to_decimal)
    capacity: Decimal | None = attrs.field(default=None, converter=_optional_decimal)


def _frozen_measurements(value: Mapping[Any, Measurement]) -> Mapping[DeviceId, Measurement]:
    return {DeviceId(str(k)): v for k, v in value.items()}


def _optional_aggregate(value: Aggregate | str | None) -> Aggregate | None:
    return None if value is None else Aggregate(value)


def _frozen_parents(value: Mapping[Any, Measurement]) -> Mapping[str, Measurement]:
    return {str(k): v for k, v in value.items()}


@attrs.frozen
class NodeMetric:
    """A node-level metric, with a reading per device.

    ``aggregate`` says how the readings of several devices add up to one figure (an agent's
    devices): ``sum``, ``max`` or ``mean``; left out, utilisations average and the rest add up.
    ``per_parent`` holds readings of hardware that holds devices without being one (a GPU
    with MIG mode on: its instances are the devices), by the id its devices name as their
    ``parent_id``; they are exported per GPU and count in no agent's figure.
    """

    key: str = attrs.field(validator=_check_key)
    type: MetricType = attrs.field(converter=MetricType)
    unit: str
    node: Measurement
    per_device: Mapping[DeviceId, Measurement] = attrs.field(
        factory=dict, converter=_frozen_measurements
    )
    aggregate: Aggregate | None = attrs.field(default=None, converter=_optional_aggregate)
    per_parent: Mapping[str, Measurement] = attrs.field(factory=dict, converter=_frozen_parents)

    @property
    def adds_up_by(self) -> Aggregate:
        """The declared :attr:`aggregate`, else the default of the metric's type."""
        return self.aggregate if self.aggregate is not None else default_aggregate(self.type)


@attrs.frozen
class WorkloadMetric:
    """A metric of one workload (a container or a process tree)."""

    key: str = attrs.field(validator=_check_key)
    type: MetricType = attrs.field(converter=MetricType)
    unit: str
    workload_id: str
    value: Measurement


@attrs.frozen
class ProcessMetric:
    """A metric of one process."""

    key: str = attrs.field(validator=_check_key)
    type: MetricType = attrs.field(converter=MetricType)
    unit: str
    pid: int
    value: Measurement


@attrs.define
class MetricContext:
    """One gather round: when it runs, state kept between rounds, and state shared within it.

    ``previous`` lets a plugin compute a rate from two readings; each plugin keeps its own keys.
    ``round_cache`` holds what every plugin of the same round may share (a workload's process
    tree, say), so it is read once per round however many plugins need it; it is not carried
    into the next round.
    """

    timestamp: float = attrs.field(factory=time.monotonic)
    previous: dict[str, tuple[float, Decimal]] = attrs.field(factory=dict)
    round_cache: dict[Hashable, Any] = attrs.field(factory=dict)

    def advance(self) -> MetricContext:
        """The context for the next round: a new timestamp, the same remembered readings."""
        return MetricContext(time.monotonic(), self.previous)

    def rate(self, key: str, value: Decimal) -> Decimal | None:
        """Remember ``value`` under ``key``; return its change per second since last time."""
        last = self.previous.get(key)
        self.previous[key] = (self.timestamp, value)
        if last is None or self.timestamp <= last[0]:
            return None
        elapsed = Decimal(repr(self.timestamp - last[0]))
        return (value - last[1]) / elapsed


@attrs.frozen
class BaseUnit:
    """The base unit a plugin's unit is exported in: ``value * factor`` in ``suffix``."""

    suffix: str
    factor: Decimal = Decimal(1)


_MILLI = Decimal("0.001")
#: the units a metric may be in (docs/metrics.md), and the base unit each is exported in
METRIC_UNITS: Mapping[str, BaseUnit] = {
    **dict.fromkeys(("bytes", "byte", "B"), BaseUnit("bytes")),
    "KiB": BaseUnit("bytes", Decimal(1024)),
    "MiB": BaseUnit("bytes", Decimal(1024**2)),
    **dict.fromkeys(("seconds", "second", "s"), BaseUnit("seconds")),
    **dict.fromkeys(("msec", "ms", "milliseconds"), BaseUnit("seconds", _MILLI)),
    **dict.fromkeys(("usec", "us", "microseconds"), BaseUnit("seconds", Decimal("0.000001"))),
    **dict.fromkeys(("nsec", "ns", "nanoseconds"), BaseUnit("seconds", Decimal("1e-9"))),
    **dict.fromkeys(("percent", "%"), BaseUnit("ratio", Decimal("0.01"))),
    "ratio": BaseUnit("ratio"),
    **dict.fromkeys(("watts", "W"), BaseUnit("watts")),
    **dict.fromkeys(("mW", "milliwatts"), BaseUnit("watts", _MILLI)),
    **dict.fromkeys(("joules", "J"), BaseUnit("joules")),
    **dict.fromkeys(("mJ", "millijoules"), BaseUnit("joules", _MILLI)),
    **dict.fromkeys(("celsius", "C"), BaseUnit("celsius")),
    **dict.fromkeys(("hertz", "Hz"), BaseUnit("hertz")),
    "MHz": BaseUnit("hertz", Decimal(10**6)),
    # a count of things (workloads, processes): exported as it is, with no unit suffix
    "": BaseUnit(""),
}
