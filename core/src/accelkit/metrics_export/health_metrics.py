"""Device health as Prometheus series (DESIGN §15), from a node's health board.

``accelkit_device_health{plugin,device,state}`` is 1 for the device's current effective state
and 0 for the others (a cordoned device reads ``unhealthy``), so ``accelkit_device_health{state=
"unhealthy"} == 1`` lists the devices out of allocation; ``accelkit_device_health_transitions_
total{plugin,device}`` counts the changes of state this process has seen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from accelkit.health import HealthState
from accelkit.node.health_board import HealthBoard
from accelkit.partition import natural_sort_key

__all__ = ["HEALTH", "TRANSITIONS", "HealthCollector"]

HEALTH = "accelkit_device_health"
TRANSITIONS = "accelkit_device_health_transitions"


class HealthCollector(Collector):
    """The health series of the board ``source()`` returns, read on every scrape."""

    def __init__(self, source: Callable[[], HealthBoard]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        board = self._source()
        health = GaugeMetricFamily(
            HEALTH,
            "1 for the device's current health state (cordoned reads unhealthy), 0 for others",
            labels=["plugin", "device", "state"],
        )
        transitions = CounterMetricFamily(
            TRANSITIONS,
            "Changes of the device's health state seen by this accelkit process",
            labels=["plugin", "device"],
        )
        counts = board.transitions()
        for plugin, devices in sorted(board.snapshot().items()):
            for device in sorted(devices, key=natural_sort_key):
                current = devices[device].state
                for state in HealthState:
                    value = 1 if state is current else 0
                    health.add_metric([plugin, device, state.value], value)
                transitions.add_metric([plugin, device], counts.get((plugin, device), 0))
        yield health
        yield transitions
