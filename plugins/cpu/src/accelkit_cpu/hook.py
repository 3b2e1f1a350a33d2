"""The cpu plugin's lifecycle hook: pin the workload to its cores and size its thread pools."""

from __future__ import annotations

from accelkit import InvalidResourceArgument
from accelkit.plugin import AbstractLifecycleHook
from accelkit.types import WorkloadConfig

#: thread-pool sizes read by OpenMP, MKL, OpenBLAS, numexpr, Accelerate and BLIS
THREAD_COUNT_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS",
)


class CPULifecycleHook(AbstractLifecycleHook):
    """Sets ``cpuset_cpus`` to the allocated cores, ``cpuset_mems`` to their NUMA nodes, and one
    thread per allocated core in :data:`THREAD_COUNT_VARS`.

    A workload allocated no core gets an empty config: it is not pinned at all.
    """

    def cores(self) -> tuple[int, ...]:
        """The allocated core numbers, ascending."""
        try:
            return tuple(sorted(int(device_id) for device_id in self.allocated_device_ids))
        except ValueError:
            msg = f"cpu allocation names a device that is not a core number: {self.device_alloc}"
            raise InvalidResourceArgument(msg) from None

    async def pre_create(self) -> WorkloadConfig:
        cores = self.cores()
        if not cores:
            return WorkloadConfig()
        nodes = sorted(
            {
                node
                for device_id in self.allocated_device_ids
                if (device := self.devices.get(device_id)) is not None
                and (node := device.numa_node) is not None
            }
        )
        threads = str(len(cores))
        return WorkloadConfig(
            cpuset_cpus=cores,
            cpuset_mems=tuple(nodes) or None,
            env_vars=dict.fromkeys(THREAD_COUNT_VARS, threads),
        )
