"""Runtimes that track workloads something else runs refuse to run one themselves."""

from __future__ import annotations

import asyncio

import pytest

from accelkit.runtime import RuntimeUnavailable, TrackingRuntime, WorkloadHandle
from accelkit.runtime.base import LaunchSpec
from accelkit.runtime.kubelet_pods import KubeletPodsRuntime
from accelkit.runtime.slurm_jobs import SlurmJobsRuntime
from accelkit.types import AgentId, Workload

RUNTIMES = [
    (KubeletPodsRuntime(), "the kubelet-pods runtime only tracks pods the kubelet runs"),
    (SlurmJobsRuntime(), "the slurm-jobs runtime only tracks jobs Slurm runs"),
]


@pytest.mark.parametrize(("runtime", "said"), RUNTIMES)
def test_making_starting_or_waiting_for_a_workload_is_refused(
    runtime: TrackingRuntime, said: str
) -> None:
    workload = Workload("w", runtime.workload_type)
    handle = WorkloadHandle(runtime.name, "w", {})
    spec = LaunchSpec(agent_id=AgentId("a"), workload=workload, argv=("true",))
    for call in (
        runtime.new_workload(AgentId("a")),
        runtime.create(spec),
        runtime.start(handle),
        runtime.wait(handle),
    ):
        with pytest.raises(RuntimeUnavailable) as raised:
            asyncio.run(call)
        assert str(raised.value) == f"{said}; it starts nothing"
    assert asyncio.run(runtime.discard(workload, handle)) is None
    assert not runtime.creates_containers


def test_only_the_kubelet_runtime_refuses_signals() -> None:
    handle = WorkloadHandle(KubeletPodsRuntime.name, "r:cuda0", {})
    with pytest.raises(RuntimeUnavailable, match="starts nothing"):
        asyncio.run(KubeletPodsRuntime().signal(handle, 15))
    assert SlurmJobsRuntime.signal is not TrackingRuntime.signal
