"""The kubelet-pods runtime: liveness of bridge bookings from the PodResources API."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from pathlib import Path

import grpc
import pytest

from accelkit.runtime.base import RuntimeUnavailable, WorkloadHandle
from accelkit.runtime.kubelet_pods import (
    ContainerDevices,
    KubeletPodsRuntime,
    kubelet_handle,
    pod_resources,
    superseded,
    with_holder,
)
from accelkit.runtime.registry import default_runtimes
from accelkit.types import AgentId, Workload
from accelkit.workload.reconcile import Reconciler
from accelkit.workload.record import LedgerRecord

from .kubelet_standin import KubeletStandIn

GPU = "accelkit.io/cuda.device"


def handle(socket: Path, ids: list[str], grace: str = "0.001", settle: str = "0") -> WorkloadHandle:
    return kubelet_handle(GPU, ids, str(socket), Decimal(grace), Decimal(settle))


def test_a_pod_listing_any_of_the_devices_keeps_the_booking_alive(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet = KubeletStandIn(k8s_root / "dp", k8s_root / "pr" / "kubelet.sock")
        await kubelet.start()
        runtime = KubeletPodsRuntime()
        reader = pod_resources(str(kubelet.pod_resources))
        booked = handle(kubelet.pod_resources, ["cuda0", "cuda1"])
        await asyncio.sleep(0.01)
        try:
            kubelet.pods = [("p", GPU, ["cuda1"])]
            assert await runtime.is_alive(booked) is True
            with pytest.raises(RuntimeUnavailable, match="delete the pod through Kubernetes"):
                await runtime.stop(booked, 0)
            kubelet.pods = [("p", "accelkit.io/cuda.mig-1g.10gb", ["cuda0"]), ("q", GPU, ["x"])]
            await reader.read(Decimal(0))  # a tick's read: the first answer without the pod
            assert await runtime.is_alive(booked) is True  # the answer before listed it
            await reader.read(Decimal(0))  # the next tick: missing twice
            assert await runtime.is_alive(booked) is False
            await runtime.stop(booked, 0)  # nothing holds it: nothing to do
            kubelet.pod_resources_up = False
            with pytest.raises(grpc.aio.AioRpcError):
                await reader.read(Decimal(0))
        finally:
            await kubelet.close()

    asyncio.run(scenario())


def test_a_new_process_asks_twice_before_a_booking_counts_as_gone(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet = KubeletStandIn(k8s_root / "dp", k8s_root / "pr" / "kubelet.sock")
        await kubelet.start()
        booked = handle(kubelet.pod_resources, ["cuda0"])
        await asyncio.sleep(0.01)
        try:
            assert await KubeletPodsRuntime().is_alive(booked) is False
            assert kubelet.list_calls == 2
        finally:
            await kubelet.close()

    asyncio.run(scenario())


def test_right_after_the_kubelet_starts_a_missing_pod_is_not_gone(k8s_root: Path) -> None:
    """The kubelet answers without running static pods for a moment after it starts: within
    the settling time (counted from its PodResources socket's creation) nothing is gone."""

    async def scenario() -> None:
        kubelet = KubeletStandIn(k8s_root / "dp", k8s_root / "pr" / "kubelet.sock")
        await kubelet.start()
        runtime = KubeletPodsRuntime()
        reader = pod_resources(str(kubelet.pod_resources))
        unsettled = handle(kubelet.pod_resources, ["cuda0"], settle="3600")
        settled = handle(kubelet.pod_resources, ["cuda0"])
        await asyncio.sleep(0.01)
        try:
            for _ in range(3):
                await reader.read(Decimal(0))
                assert await runtime.is_alive(unsettled) is True
            assert await runtime.is_alive(settled) is False
        finally:
            await kubelet.close()

    asyncio.run(scenario())


def test_one_list_serves_every_booking_however_many(k8s_root: Path) -> None:
    """The kubelet allows 100 PodResources calls a second in bursts of 10: judging 100
    bookings side by side asks it once."""

    async def scenario() -> None:
        kubelet = KubeletStandIn(k8s_root / "dp", k8s_root / "pr" / "kubelet.sock")
        await kubelet.start()
        kubelet.pods = [(f"p{i}", GPU, [f"cuda{i}"]) for i in range(100)]
        runtime = KubeletPodsRuntime()
        booked = [handle(kubelet.pod_resources, [f"cuda{i}"]) for i in range(100)]
        await asyncio.sleep(0.01)
        try:
            alive = await asyncio.gather(*(runtime.is_alive(h) for h in booked))
            assert alive == [True] * 100
            assert kubelet.list_calls == 1
        finally:
            await kubelet.close()

    asyncio.run(scenario())


def test_a_superseded_booking_is_gone_at_once(k8s_root: Path) -> None:
    fresh = handle(k8s_root / "none.sock", ["cuda0"], grace="600")
    assert asyncio.run(KubeletPodsRuntime().is_alive(superseded(fresh, "k8s:x"))) is False


def test_a_booking_whose_pod_was_listed_goes_with_it_within_the_grace(k8s_root: Path) -> None:
    """The admission grace covers a container the kubelet has not listed yet, not one it
    listed and then dropped: the pod's devices are free once two answers asked after the
    listing lack it."""

    async def scenario() -> None:
        kubelet = KubeletStandIn(k8s_root / "dp", k8s_root / "pr" / "kubelet.sock")
        await kubelet.start()
        fresh = handle(kubelet.pod_resources, ["cuda0"], grace="600")
        holder = ContainerDevices("default", "p", "main", GPU, frozenset({"cuda0"}))
        named = with_holder(fresh, holder, Decimal(time.time() - 1))
        later = with_holder(fresh, holder, Decimal(time.time() + 3600))
        runtime = KubeletPodsRuntime()
        try:
            kubelet.pods = []
            assert await runtime.is_alive(fresh) is True  # not listed yet: within the grace
            assert await runtime.is_alive(named) is False
            # answers asked before the one that listed the pod say nothing about it
            assert await runtime.is_alive(later) is True
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


def test_answers_of_two_kubelets_are_not_consecutive(k8s_root: Path) -> None:
    """A kubelet that restarted between two answers (its socket made anew) has not confirmed
    that a pod is gone: the booking is kept."""

    async def scenario() -> None:
        kubelet = KubeletStandIn(k8s_root / "dp", k8s_root / "pr" / "kubelet.sock")
        await kubelet.start()
        reader = pod_resources(str(kubelet.pod_resources))
        booked = handle(kubelet.pod_resources, ["cuda0"])
        try:
            first = await reader.read(Decimal(0))
            await kubelet.close()  # the kubelet restarts: a new PodResources socket
            kubelet.pod_resources.unlink(missing_ok=True)
            await kubelet.start()
            assert await KubeletPodsRuntime().is_alive(booked) is True
            second = reader.latest
            assert second is not None
            assert second.kubelet != first.kubelet
        finally:
            await kubelet.close()

    asyncio.run(scenario())


def test_callers_waiting_on_one_list_all_get_its_failure(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet = KubeletStandIn(k8s_root / "dp", k8s_root / "pr" / "kubelet.sock")
        await kubelet.start()
        kubelet.pod_resources_up = False
        reader = pod_resources(str(kubelet.pod_resources))
        runtime = KubeletPodsRuntime()
        booked = handle(kubelet.pod_resources, ["cuda0"])
        await asyncio.sleep(0.01)
        try:
            results = await asyncio.gather(
                *(reader.read(Decimal(0)) for _ in range(5)), return_exceptions=True
            )
            assert all(isinstance(r, grpc.aio.AioRpcError) for r in results)
            assert kubelet.list_calls == 1
            assert await runtime.is_alive(booked) is None
        finally:
            await kubelet.close()

    asyncio.run(scenario())
