"""Exporting metrics: snapshots of every plugin's figures, Prometheus exposition, ``/metrics``."""

from __future__ import annotations

from accelkit.metrics_export.agent_share import agent_measurement, plugin_factor
from accelkit.metrics_export.exposition import Exposition
from accelkit.metrics_export.gather import MetricsGatherer
from accelkit.metrics_export.prometheus import SnapshotCollector, families, family_name
from accelkit.metrics_export.scrape_errors import SCRAPE_ERROR, ScrapeErrorCollector
from accelkit.metrics_export.server import LOOPBACK, MetricsServer, MetricsServerError
from accelkit.metrics_export.snapshot import AgentMetric, MetricsSnapshot, WorkloadSample

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
