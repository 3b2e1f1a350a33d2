"""The agent-scoped view of the GPUs, with the workload and process metrics of its devices."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from accelkit.metrics import Measurement, MetricContext, MetricType, ProcessMetric, WorkloadMetric
from accelkit.plugin import MaskedAgentContext
from accelkit.types import AgentId, Workload
from accelkit_cuda.metrics import memory_of, process_memory

if TYPE_CHECKING:
    from accelkit.partition import Partition
    from accelkit_cuda.plugin import CUDAPlugin

GPU_MEMORY_KEY = "gpu_mem"


class CUDAAgentContext(MaskedAgentContext):
    """A masked context whose metrics count only GPU memory on the agent's own devices."""

    plugin: CUDAPlugin

    def __init__(self, plugin: CUDAPlugin, agent_id: AgentId, partition: Partition) -> None:
        super().__init__(plugin, agent_id, partition)
        self.plugin = plugin

    async def _usage(self) -> dict[int, int]:
        handles = self.plugin.handles(self.device_mask)
        return await asyncio.to_thread(process_memory, self.plugin.library, handles)

    async def gather_workload_metrics(
        self, ctx: MetricContext, workload: Workload
    ) -> Sequence[WorkloadMetric]:
        """``gpu_mem``: bytes of GPU memory the workload's processes hold on these devices.

        A workload that maps to no processes (see :mod:`accelkit_cuda.processes`) gets none.
        """
        pids = frozenset(self.plugin.workload_pids(workload))
        if not pids:
            return ()
        used = memory_of(await self._usage(), pids)
        return (
            WorkloadMetric(
                GPU_MEMORY_KEY, MetricType.GAUGE, "bytes", workload.id, Measurement(used)
            ),
        )

    async def gather_process_metrics(self, ctx: MetricContext, pid: int) -> Sequence[ProcessMetric]:
        """``gpu_mem``: bytes of GPU memory the process holds on these devices."""
        used = memory_of(await self._usage(), (pid,))
        return (ProcessMetric(GPU_MEMORY_KEY, MetricType.GAUGE, "bytes", pid, Measurement(used)),)
