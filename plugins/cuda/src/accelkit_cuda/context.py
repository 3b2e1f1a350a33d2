"""The agent-scoped view of the GPUs, with the workload and process metrics of its devices."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from accelkit import (
    Measurement,
    MetricContext,
    MetricType,
    PluginContractError,
    ProcessMetric,
    WorkloadMetric,
)
from accelkit.plugin import AbstractComputePlugin, AgentShare, MaskedAgentContext
from accelkit.types import AgentId, DeviceId, Workload
from accelkit_cuda.metrics import memory_of, process_memory
from accelkit_cuda.nvml import Handle
from accelkit_cuda.nvml.readings import NVMLProcesses
from accelkit_cuda.processes import WorkloadPids

GPU_MEMORY_KEY = "gpu_mem"


@runtime_checkable
class GPUSource(Protocol):
    """What the context reads from its plugin: NVML's process lists, device handles and
    workload processes."""

    @property
    def nvml_processes(self) -> NVMLProcesses:
        """The process calls of the initialised NVML library."""
        ...

    @property
    def workload_pids(self) -> WorkloadPids:
        """Maps a workload to the pids whose GPU use counts as its own."""
        ...

    def handles(self, device_ids: Iterable[DeviceId]) -> dict[DeviceId, Handle]:
        """NVML handles of the given devices."""
        ...


class CUDAAgentContext(MaskedAgentContext):
    """A masked context whose metrics count only GPU memory on the agent's own devices."""

    def __init__(
        self, plugin: AbstractComputePlugin, agent_id: AgentId, partition: AgentShare
    ) -> None:
        super().__init__(plugin, agent_id, partition)
        if not isinstance(plugin, GPUSource):
            msg = f"CUDAAgentContext needs a plugin with NVML handles, got {type(plugin).__name__}"
            raise PluginContractError(msg)
        self.source = plugin

    async def _usage(self) -> dict[int, int]:
        handles = self.source.handles(self.device_mask)
        return await asyncio.to_thread(process_memory, self.source.nvml_processes, handles)

    async def gather_workload_metrics(
        self, ctx: MetricContext, workload: Workload
    ) -> Sequence[WorkloadMetric]:
        """``gpu_mem``: bytes of GPU memory the workload's processes hold on these devices.

        A workload that maps to no processes (see :mod:`accelkit_cuda.processes`) gets none.
        """
        pids = frozenset(self.source.workload_pids(workload))
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
