"""The kubelet-pods runtime: liveness of bridge bookings from the PodResources API."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.runtime.base import RuntimeUnavailable, WorkloadHandle
from accelkit.runtime.kubelet_pods import KubeletPodsRuntime, kubelet_handle
from accelkit.runtime.registry import default_runtimes
from accelkit.types import AgentId, Workload
from accelkit.workload.reconcile import Reconciler
from accelkit.workload.record import LedgerRecord

from .kubelet_standin import KubeletStandIn

GPU = "accelkit.io/cuda.device"


def handle(socket: Path, ids: list[str], grace: str = "0.001") -> WorkloadHandle:
    return kubelet_handle(GPU, ids, str(socket), Decimal(grace))


def test_a_pod_listing_any_of_the_devices_keeps_the_booking_alive(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet = KubeletStandIn(k8s_root / "dp", k8s_root / "pr" / "kubelet.sock")
        await kubelet.start()
        runtime = KubeletPodsRuntime()
        booked = handle(kubelet.pod_resources, ["cuda0", "cuda1"])
        await asyncio.sleep(0.01)
        try:
            kubelet.pods = [("p", GPU, ["cuda1"])]
            assert await runtime.is_alive(booked) is True
            with pytest.raises(RuntimeUnavailable, match="delete the pod through Kubernetes"):
                await runtime.stop(booked, 0)
            kubelet.pods = [("p", "accelkit.io/cuda.mig-1g.10gb", ["cuda0"]), ("q", GPU, ["x"])]
            assert await runtime.is_alive(booked) is False
            await runtime.stop(booked, 0)  # nothing holds it: nothing to do
            kubelet.pod_resources_up = False
            assert await runtime.is_alive(booked) is None
        finally:
            await kubelet.close()

    asyncio.run(scenario())


def test_without_the_kubelet_liveness_cannot_be_told(k8s_root: Path) -> None:
    runtime = KubeletPodsRuntime()
    booked = handle(k8s_root / "none.sock", ["cuda0"])
    time.sleep(0.01)  # beyond its admission grace
    assert asyncio.run(runtime.is_alive(booked)) is None


def test_a_fresh_booking_counts_as_alive_before_the_kubelet_lists_it(k8s_root: Path) -> None:
    runtime = KubeletPodsRuntime()
    fresh = handle(k8s_root / "none.sock", ["cuda0"], grace="60")
    assert asyncio.run(runtime.is_alive(fresh)) is True
    damaged = WorkloadHandle(fresh.runtime, fresh.ident, {**fresh.details, "booked-at": "x"})
    assert asyncio.run(runtime.is_alive(damaged)) is None


def test_it_starts_nothing() -> None:
    runtime = KubeletPodsRuntime()
    with pytest.raises(RuntimeUnavailable, match="starts nothing"):
        asyncio.run(runtime.new_workload(AgentId("a")))
    assert runtime.describe(kubelet_handle(GPU, ["cuda0"], "/s")) == [
        f"kubelet pod holding {GPU}:cuda0"
    ]


def test_a_container_record_without_handle_is_still_asked_of_docker() -> None:
    runtimes = default_runtimes()
    assert "kubelet-pods" in runtimes
    reconciler = Reconciler(None, {}, runtimes=runtimes)  # type: ignore[arg-type]
    record = LedgerRecord(AgentId("a"), Workload.container("w"), {}, ())
    found = reconciler.handle_of(record)
    assert found is not None
    assert (found.runtime, found.ident) == ("docker", "w")
