"""Gathering every plugin's metrics from a started partition host, each plugin guarded."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from decimal import Decimal

from accelkit.host import PartitionHost
from accelkit.metrics import MetricContext, NodeMetric
from accelkit.metrics_export.agent_share import agent_measurement, plugin_factor
from accelkit.metrics_export.snapshot import AgentMetric, MetricsSnapshot, WorkloadSample
from accelkit.types import AgentId, DeviceName, Workload
from accelkit.workload.ledger import Ledger

log = logging.getLogger(__name__)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class MetricsGatherer:
    """Gathers snapshots from a started host; keeps each plugin's readings between gathers.

    A plugin whose gather raises is left out of that snapshot and named in its ``errors``; the
    other plugins' metrics are still reported. ``workloads`` lists, per agent, the workloads
    whose metrics to gather too.
    """

    def __init__(
        self,
        host: PartitionHost,
        workloads: Mapping[AgentId, Sequence[Workload]] | None = None,
    ) -> None:
        self.host = host
        self.workloads = None if workloads is None else dict(workloads)
        self._previous: dict[str, dict[str, tuple[float, Decimal]]] = {}
        self._round = MetricContext()
        self._lock = asyncio.Lock()

    def _context(self, name: str) -> MetricContext:
        """The metric context of one plugin (or agent workload) in the current round.

        Each keeps its own readings between rounds (for rates); all of a round share its
        ``round_cache``, so a workload's process tree is read once for every plugin.
        """
        previous = self._previous.setdefault(name, {})
        return MetricContext(self._round.timestamp, previous, self._round.round_cache)

    def _workloads(self) -> Mapping[AgentId, Sequence[Workload]]:
        """The workloads given, or else those the node's allocation ledger holds (read only)."""
        if self.workloads is not None:
            return self.workloads
        ledger = Ledger(self.host.config.resource.state_dir, source=self.host.config.source_name)
        try:
            records = ledger.read_all()
        finally:
            ledger.close()
        found: dict[AgentId, list[Workload]] = {}
        for (agent_id, _), record in sorted(records.items()):
            found.setdefault(agent_id, []).append(record.workload)
        return found

    async def gather(self) -> MetricsSnapshot:
        """One snapshot; concurrent callers are served one after the other."""
        async with self._lock:
            self._round = MetricContext()
            node: dict[DeviceName, tuple[NodeMetric, ...]] = {}
            errors: dict[DeviceName, str] = {}
            for key, plugin in self.host.plugins.items():
                try:
                    node[key] = tuple(await plugin.gather_node_metrics(self._context(key)))
                except Exception as exc:
                    errors[key] = _describe(exc)
                    log.warning("plugin %s: gathering node metrics failed", key, exc_info=True)
            workloads = await self._gather_workloads(errors)
            return MetricsSnapshot(node, self._agent_metrics(node), workloads, errors)

    def _agent_metrics(self, node: Mapping[DeviceName, Sequence[NodeMetric]]) -> list[AgentMetric]:
        found: list[AgentMetric] = []
        for agent_id, view in self.host.agents.items():
            scaling = view.scaling_factors()
            for key, context in view.contexts.items():
                factor = plugin_factor(key, scaling)
                ids = context.device_mask
                by_amount = context.plugin.shared_by_amount
                for metric in node.get(key, ()):
                    share = agent_measurement(metric, ids, factor, shared_by_amount=by_amount)
                    if share is not None:
                        value, basis = share
                        found.append(
                            AgentMetric(
                                agent_id, key, metric.key, metric.type, metric.unit, value, basis
                            )
                        )
        return found

    async def _gather_workloads(self, errors: dict[DeviceName, str]) -> list[WorkloadSample]:
        samples: list[WorkloadSample] = []
        for agent_id, workloads in self._workloads().items():
            view = self.host.agents.get(agent_id)
            if view is None:
                log.warning("metrics: no agent %r for its workloads", agent_id)
                continue
            for key, context in view.contexts.items():
                for workload in workloads:
                    ctx = self._context(f"{agent_id}/{key}/{workload.id}")
                    try:
                        metrics = await context.gather_workload_metrics(ctx, workload)
                    except Exception as exc:
                        errors[key] = _describe(exc)
                        log.warning("plugin %s: workload metrics failed", key, exc_info=True)
                        continue
                    samples += [WorkloadSample(agent_id, key, m) for m in metrics]
        return samples
