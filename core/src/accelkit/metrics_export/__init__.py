"""Exporting metrics: snapshots of every plugin's figures, Prometheus exposition, ``/metrics``.

The names below are imported when first used: ``accelkit metrics`` prints one snapshot and
needs no HTTP server, whose import (aiohttp) took longer than the rest of the command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.lazy import lazy_names

if TYPE_CHECKING:
    from accelkit.metrics_export.agent_share import agent_measurement, plugin_factor
    from accelkit.metrics_export.exposition import Exposition
    from accelkit.metrics_export.gather import MetricsGatherer
    from accelkit.metrics_export.prometheus import SnapshotCollector, families, family_name
    from accelkit.metrics_export.scrape_errors import SCRAPE_ERROR, ScrapeErrorCollector
    from accelkit.metrics_export.server import LOOPBACK, MetricsServer, MetricsServerError
    from accelkit.metrics_export.snapshot import AgentMetric, MetricsSnapshot, WorkloadSample

#: each name, and the module of this package that defines it
_MODULE_OF = {
    "LOOPBACK": ".server",
    "SCRAPE_ERROR": ".scrape_errors",
    "AgentMetric": ".snapshot",
    "Exposition": ".exposition",
    "MetricsGatherer": ".gather",
    "MetricsServer": ".server",
    "MetricsServerError": ".server",
    "MetricsSnapshot": ".snapshot",
    "ScrapeErrorCollector": ".scrape_errors",
    "SnapshotCollector": ".prometheus",
    "WorkloadSample": ".snapshot",
    "agent_measurement": ".agent_share",
    "families": ".prometheus",
    "family_name": ".prometheus",
    "plugin_factor": ".agent_share",
}

__all__ = [
    "LOOPBACK",
    "SCRAPE_ERROR",
    "AgentMetric",
    "Exposition",
    "MetricsGatherer",
    "MetricsServer",
    "MetricsServerError",
    "MetricsSnapshot",
    "ScrapeErrorCollector",
    "SnapshotCollector",
    "WorkloadSample",
    "agent_measurement",
    "families",
    "family_name",
    "plugin_factor",
]


__getattr__ = lazy_names(__name__, _MODULE_OF)
