"""``accelkit_plugin_scrape_error``: which plugins a snapshot is missing (DESIGN §17)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from accelkit.metrics_export.snapshot import MetricsSnapshot

__all__ = ["SCRAPE_ERROR", "ScrapeErrorCollector"]

SCRAPE_ERROR = "accelkit_plugin_scrape_error"


class ScrapeErrorCollector(Collector):
    """One gauge per plugin: 1 when its metrics are missing (it failed or timed out), else 0.

    The reason is logged, not exported: a free-text label would start a new series for every
    message.
    """

    def __init__(self, source: Callable[[], MetricsSnapshot]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        snapshot = self._source()
        family = GaugeMetricFamily(
            SCRAPE_ERROR,
            "1 when the plugin's metrics are missing from this scrape (it failed or timed out)",
            labels=["plugin"],
        )
        for plugin in sorted({*snapshot.node, *snapshot.errors}):
            family.add_metric([plugin], 1 if plugin in snapshot.errors else 0)
        yield family
