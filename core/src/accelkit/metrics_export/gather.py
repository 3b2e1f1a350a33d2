"""Gathering every plugin's metrics from a started partition host, each plugin guarded.

Plugins are asked at the same time, each on its own worker (:mod:`accelkit.calls`) under a time
limit (``[plugins] call-timeout``, or the scrape's own budget when shorter): a plugin that
raises, does not answer in time or answers something else than metrics (a string, say) is left
out of that snapshot and named in its ``errors``, and the snapshot comes back when the limit
expires at the latest. Callers that ask while a gather is under way share its snapshot, so a
burst of scrapes costs one round of plugin calls, never one per scrape.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import TypeVar

import attrs

from accelkit.calls import call_async, timeout_message
from accelkit.errors import ConfigError, PluginContractError, PluginTimeout
from accelkit.host import PartitionHost
from accelkit.metrics import Measurement, MetricContext, NodeMetric, WorkloadMetric
from accelkit.metrics_export.agent_share import agent_measurement, plugin_factor
from accelkit.metrics_export.snapshot import AgentMetric, MetricsSnapshot, WorkloadSample
from accelkit.types import AgentId, DeviceName, Workload

log = logging.getLogger(__name__)

_M = TypeVar("_M", NodeMetric, WorkloadMetric)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _readings(metric: NodeMetric | WorkloadMetric) -> list[object]:
    if isinstance(metric, NodeMetric):
        return [metric.node, *metric.per_device.values()]
    return [metric.value]


def checked(method: str, kind: type[_M], found: object) -> tuple[_M, ...]:
    """``found`` as metrics of ``kind``; :class:`PluginContractError` naming ``method`` and
    what it returned instead (a string, a dict, a metric whose reading is no Measurement)."""
    if isinstance(found, str | bytes | Mapping) or not isinstance(found, Iterable):
        msg = f"{method} returned {type(found).__name__}, not a sequence of {kind.__name__}"
        raise PluginContractError(msg)
    metrics = tuple(found)
    for metric in metrics:
        if not isinstance(metric, kind):
            msg = f"{method} returned a {type(metric).__name__} among its {kind.__name__}s"
            raise PluginContractError(msg)
        if bad := [r for r in _readings(metric) if not isinstance(r, Measurement)]:
            msg = (
                f"{method} returned metric {metric.key!r} with a reading of "
                f"{type(bad[0]).__name__}, not a Measurement"
            )
            raise PluginContractError(msg)
    return metrics


@attrs.define
class _Answer:
    """What one plugin answered in one round, and what it was doing when it stopped."""

    node: tuple[NodeMetric, ...] | None = None
    samples: list[WorkloadSample] = attrs.field(factory=list)
    doing: str = "gather_node_metrics"
    error: str | None = None


class MetricsGatherer:
    """Gathers snapshots from a started host; keeps each plugin's readings between gathers.

    A plugin whose gather raises, or does not answer within ``timeout`` seconds (default: the
    host config's ``call-timeout``), is left out of that snapshot and named in its ``errors``;
    the other plugins' metrics are still reported. ``workloads`` lists, per agent, the
    workloads whose metrics to gather too.
    """

    def __init__(
        self,
        host: PartitionHost,
        workloads: Mapping[AgentId, Sequence[Workload]] | None = None,
        *,
        timeout: Decimal | None = None,
    ) -> None:
        self.host = host
        self.workloads = None if workloads is None else dict(workloads)
        self.timeout = host.config.plugins.call_timeout if timeout is None else timeout
        self._previous: dict[str, dict[str, tuple[float, Decimal]]] = {}
        self._round = MetricContext()
        self._under_way: asyncio.Future[MetricsSnapshot] | None = None

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
        if not os.path.isdir(self.host.config.resource.state_dir):
            return {}  # no state directory, no ledger: no workloads (and no SQLite to import)
        from accelkit.workload.ledger import Ledger

        ledger = Ledger(self.host.config.resource.state_dir, source=self.host.config.source_name)
        try:
            records = ledger.read_all()
        except ConfigError as exc:  # an unsafe or unreadable ledger: node metrics still count
            log.warning("metrics: no workload metrics: %s", exc)
            return {}
        found: dict[AgentId, list[Workload]] = {}
        for (agent_id, _), record in sorted(records.items()):
            found.setdefault(agent_id, []).append(record.workload)
        return found

    async def gather(self, timeout: Decimal | None = None) -> MetricsSnapshot:
        """One snapshot, each plugin given at most ``timeout`` (and :attr:`timeout`) seconds.

        A caller that comes while a gather is under way waits for that one and shares its
        snapshot; a caller that gives up (is cancelled) never cancels it for the others.
        """
        if self._under_way is None or self._under_way.done():
            limit = self.timeout if timeout is None else min(timeout, self.timeout)
            self._under_way = asyncio.ensure_future(self._gather(limit))
        return await asyncio.shield(self._under_way)

    async def _gather(self, limit: Decimal) -> MetricsSnapshot:
        self._round = MetricContext()
        workloads = dict(self._workloads())
        for agent_id in [a for a in workloads if a not in self.host.agents]:
            log.warning("metrics: no agent %r for its workloads", agent_id)
            del workloads[agent_id]
        keys = list(self.host.plugins)
        answers = await asyncio.gather(*(self._ask(key, workloads, limit) for key in keys))
        node: dict[DeviceName, tuple[NodeMetric, ...]] = {}
        samples: list[WorkloadSample] = []
        errors: dict[DeviceName, str] = {}
        for key, answer in zip(keys, answers, strict=True):
            if answer.node is not None:
                node[key] = answer.node
            samples += answer.samples
            if answer.error is not None:
                errors[key] = answer.error
        return MetricsSnapshot(node, self._agent_metrics(node), samples, errors)

    async def _ask(
        self, key: DeviceName, workloads: Mapping[AgentId, Sequence[Workload]], limit: Decimal
    ) -> _Answer:
        """One plugin's node and workload metrics, all within ``limit`` seconds."""
        answer = _Answer()
        calls = self.host.config.plugins.call_timeout
        # the scrape's budget, when shorter than call-timeout, stops waiting without failing
        # the plugin: a call still running then is judged by the call's own limit
        budget = asyncio.timeout(float(limit)) if limit < calls else contextlib.nullcontext()
        try:
            async with budget:
                plugin = self.host.plugins[key]
                ask = functools.partial(plugin.gather_node_metrics, self._context(key))
                found = await call_async(key, answer.doing, calls, ask)
                answer.node = checked(answer.doing, NodeMetric, found)
                answer.doing = "gather_workload_metrics"
                await self._workload_metrics(key, workloads, answer, calls)
        except TimeoutError:
            answer.error = timeout_message(key, answer.doing, limit)
            log.warning("metrics: %s", answer.error)
        except PluginTimeout as exc:  # the message names the plugin, the time and the call
            answer.error = str(exc)
            log.warning("metrics: %s", answer.error)
        except Exception as exc:
            answer.error = _describe(exc)
            log.warning("plugin %s: gathering node metrics failed", key, exc_info=True)
        return answer

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

    async def _workload_metrics(
        self,
        key: DeviceName,
        workloads: Mapping[AgentId, Sequence[Workload]],
        answer: _Answer,
        calls: Decimal,
    ) -> None:
        for agent_id, listed in workloads.items():
            if (context := self.host.agents[agent_id].contexts.get(key)) is None:
                continue
            for workload in listed:
                ctx = self._context(f"{agent_id}/{key}/{workload.id}")
                ask = functools.partial(context.gather_workload_metrics, ctx, workload)
                try:
                    found = await call_async(key, answer.doing, calls, ask)
                    metrics = checked(answer.doing, WorkloadMetric, found)
                except PluginTimeout:
                    raise  # the plugin is stuck: the rest of its workloads are not asked
                except Exception as exc:
                    answer.error = _describe(exc)
                    log.warning("plugin %s: workload metrics failed", key, exc_info=True)
                    continue
                answer.samples += [WorkloadSample(agent_id, key, m) for m in metrics]
