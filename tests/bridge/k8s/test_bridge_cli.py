"""The bridge end to end: ``accelkit k8s-device-plugin`` as a real process, the kubelet stand-in
(not a real kubelet) registering it, streaming its devices, asking for preferred allocations,
allocating, listing pods through PodResources and restarting."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import grpc
import pytest

from accelkit.testing.cli_runner import cli_env

from .bridge_process import BridgeProcess, write_node
from .kubelet_standin import KubeletStandIn

pytestmark = pytest.mark.slow  # real accelkit processes

GPU = "accelkit.io/cuda.device"
MIG = "accelkit.io/cuda.mig-1g.10gb"


def standin(root: Path) -> KubeletStandIn:
    return KubeletStandIn(root / "device-plugins", root / "pod-resources" / "kubelet.sock")


async def started(root: Path, *, grace: str = "1") -> tuple[KubeletStandIn, BridgeProcess]:
    kubelet = standin(root)
    await kubelet.start()
    bridge = BridgeProcess(write_node(root, grace=grace))
    return kubelet, bridge


def test_registers_each_resource_and_streams_devices_with_numa(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet, bridge = await started(k8s_root)
        try:
            gpu = await kubelet.wait_registered(GPU)
            mig = await kubelet.wait_registered(MIG)
            request = next(r for r in kubelet.registrations if r.resource_name == GPU)
            assert request.version == "v1beta1"
            assert request.endpoint == "accelkit-accelkit.io_cuda.device.sock"
            assert request.options.get_preferred_allocation_available
            assert not request.options.pre_start_required
            assert await gpu.next_list(0) == [
                ("cuda0", "Healthy", [0]),
                ("cuda1", "Healthy", [0]),
                ("cuda2", "Healthy", [1]),
                ("cuda3", "Healthy", [1]),
            ]
            assert await mig.next_list(0) == [("mig0", "Healthy", [1]), ("mig1", "Healthy", [1])]
            options = await gpu.options()
            assert options.get_preferred_allocation_available
        finally:
            await kubelet.close()
            code, err = bridge.stop()
        assert code == 0, err
        assert not list((k8s_root / "device-plugins").glob("accelkit-*.sock"))

    asyncio.run(scenario())


def test_preferred_allocation_keeps_a_container_on_one_numa_node(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet, bridge = await started(k8s_root)
        try:
            gpu = await kubelet.wait_registered(GPU)
            every = ["cuda0", "cuda1", "cuda2", "cuda3"]
            assert await gpu.preferred(every, [], 2) == ["cuda0", "cuda1"]
            assert await gpu.preferred(every, ["cuda3"], 2) == ["cuda3", "cuda2"]
            assert await gpu.preferred(["cuda0", "cuda2", "cuda3"], [], 2) == ["cuda2", "cuda3"]
        finally:
            await kubelet.close()
            bridge.stop()

    asyncio.run(scenario())


def test_allocate_books_hands_over_and_refuses_what_something_else_holds(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet, bridge = await started(k8s_root, grace="600")
        try:
            gpu = await kubelet.wait_registered(GPU)
            reply = await gpu.allocate(["cuda1", "cuda0"])
            [container] = reply.container_responses
            # in the order the kubelet gave
            assert dict(container.envs) == {"MOCK_CUDA_DEVICES": "cuda1,cuda0"}
            assert [d.name for d in container.cdi_devices] == [
                "accelkit.io/agent-1=cuda-cuda1",
                "accelkit.io/agent-1=cuda-cuda0",
            ]
            assert container.annotations["io.accelkit.workload"] == f"k8s:{GPU}:cuda0,cuda1"
            [row] = bridge.workloads()
            assert row["workload"] == f"k8s:{GPU}:cuda0,cuda1"
            assert row["type"] == "container"
            assert row["devices"]["cuda"] == ["cuda0", "cuda1"]

            # the kubelet hands out a booked device again only once the pod that held it left
            # (or to the next container of the same pod): the old booking is handed over
            reply = await gpu.allocate(["cuda0"])
            assert reply.container_responses[0].envs["MOCK_CUDA_DEVICES"] == "cuda0"
            assert [w["workload"] for w in bridge.workloads()] == [f"k8s:{GPU}:cuda0"]
            await gpu.allocate(["cuda0"])  # the same ids again: the same booking
            assert [w["workload"] for w in bridge.workloads()] == [f"k8s:{GPU}:cuda0"]

            # a device another accelkit process holds is refused naming it, nothing booked;
            # the kubelet sees it Unhealthy and it is never preferred
            run = bridge.popen_accelkit(
                "run", "--agent", "agent-1", "--slots", "cuda.device=1", "--", "sleep", "600"
            )
            try:
                held = await asyncio.to_thread(bridge.wait_run_workload)
                device = held["devices"]["cuda"][0]
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await gpu.allocate(["cuda3" if device != "cuda3" else "cuda2"], [device])
                assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
                holder = f"{device} held by workload {held['workload']!r} of agent 'agent-1'"
                assert holder in (refused.value.details() or "")
                assert sorted(w["workload"] for w in bridge.workloads()) == sorted(
                    [f"k8s:{GPU}:cuda0", held["workload"]]
                )
                listed = await gpu.next_list(0)
                deadline = time.monotonic() + 30
                while (device, "Unhealthy") not in [d[:2] for d in gpu.lists[-1]]:
                    assert time.monotonic() < deadline, gpu.lists
                    await asyncio.sleep(0.05)
                assert listed
                free = [d for d in ("cuda1", "cuda2", "cuda3") if d != device]
                assert await gpu.preferred([device, *free], [], 2) == free[:2]
                event = await asyncio.to_thread(
                    bridge.wait_event, lambda e: e["event"] == "held" and e["device"] == device
                )
                assert held["workload"] in event["message"]
                rows = {w["workload"]: w for w in bridge.workloads()}
                [note] = rows[held["workload"]]["notes"]
                assert f"advertised Unhealthy to the kubelet as {GPU}" in note["text"]
            finally:
                run.terminate()
                run.wait(timeout=60)
            await asyncio.to_thread(
                bridge.wait_event, lambda e: e["event"] == "free" and e["device"] == device
            )
        finally:
            await kubelet.close()
            bridge.stop()

    asyncio.run(scenario())


def test_allocate_of_unknown_or_repeated_ids_is_invalid(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet, bridge = await started(k8s_root)
        try:
            gpu = await kubelet.wait_registered(GPU)
            for ids, words in (
                (["cuda9"], "unknown device ids cuda9"),
                (["mig0"], "unknown device ids mig0"),
                (["cuda0", "cuda0"], "requested twice"),
                ([], "no device ids"),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await gpu.allocate(ids)
                assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                assert words in (refused.value.details() or "")
            assert bridge.workloads() == []
        finally:
            await kubelet.close()
            bridge.stop()

    asyncio.run(scenario())


def test_mig_like_devices_are_their_own_resource(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet, bridge = await started(k8s_root)
        try:
            mig = await kubelet.wait_registered(MIG)
            reply = await mig.allocate(["mig1"])
            assert dict(reply.container_responses[0].envs) == {"MOCK_CUDA_DEVICES": "mig1"}
            [row] = bridge.workloads()
            assert row["workload"] == f"k8s:{MIG}:mig1"
        finally:
            await kubelet.close()
            bridge.stop()

    asyncio.run(scenario())


def test_a_booking_is_freed_once_no_pod_lists_its_devices(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet, bridge = await started(k8s_root, grace="0.5")
        try:
            gpu = await kubelet.wait_registered(GPU)
            await gpu.allocate(["cuda2"])
            kubelet.pods = [("trainer", GPU, ["cuda2"])]
            await asyncio.sleep(1.5)  # beyond the admission grace: the pod keeps it
            assert [w["workload"] for w in bridge.workloads()] == [f"k8s:{GPU}:cuda2"]
            kubelet.pods = []  # the pod is gone
            await asyncio.to_thread(
                bridge.wait_event,
                lambda e: e == {"event": "released", "workload": f"k8s:{GPU}:cuda2"},
            )
            assert bridge.workloads() == []
            await gpu.allocate(["cuda2"])  # granted again
        finally:
            await kubelet.close()
            bridge.stop()

    asyncio.run(scenario())


def test_without_pod_resources_bookings_stay_until_released(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet, bridge = await started(k8s_root, grace="0.2")
        kubelet.pod_resources_up = False
        try:
            gpu = await kubelet.wait_registered(GPU)
            await gpu.allocate(["cuda0"])
            warning = await asyncio.to_thread(
                bridge.wait_event,
                lambda e: e["event"] == "warning" and "PodResources" in e["message"],
            )
            assert "kept until 'accelkit release'" in warning["message"]
            await asyncio.sleep(1.0)
            assert [w["workload"] for w in bridge.workloads()] == [f"k8s:{GPU}:cuda0"]
            refused = bridge.accelkit("release", f"k8s:{GPU}:cuda0")
            assert refused.returncode == 2
            assert "--force" in refused.stderr
            freed = bridge.accelkit("release", "--force", f"k8s:{GPU}:cuda0")
            assert freed.returncode == 0, freed.stderr
            assert bridge.workloads() == []
        finally:
            await kubelet.close()
            bridge.stop()

    asyncio.run(scenario())


def test_a_restarted_kubelet_gets_every_plugin_registered_again(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet, bridge = await started(k8s_root)
        try:
            await kubelet.wait_registered(GPU)
            await kubelet.wait_registered(MIG)
            await kubelet.restart()
            gpu = await kubelet.wait_registered(GPU, count=2)
            await kubelet.wait_registered(MIG, count=2)
            assert [d[0] for d in await gpu.next_list(0)] == ["cuda0", "cuda1", "cuda2", "cuda3"]
            await gpu.allocate(["cuda3"])
        finally:
            await kubelet.close()
            bridge.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize("there", ["nothing", "a fifo"])
def test_the_bridge_waits_for_the_kubelets_directory(k8s_root: Path, there: str) -> None:
    directory = k8s_root / "device-plugins"
    if there == "a fifo":
        os.mkfifo(directory)  # made the bridge fail with NotADirectoryError

    async def scenario() -> None:
        bridge = BridgeProcess(write_node(k8s_root))
        kubelet = standin(k8s_root)
        try:
            warning = await asyncio.to_thread(bridge.wait_event, lambda e: e["event"] == "warning")
            assert f"no kubelet device-plugins directory at {directory}" in warning["message"]
            assert "trying again" in warning["message"]
            if there == "a fifo":
                assert "(something else is there, not a directory)" in warning["message"]
                directory.unlink()
            directory.mkdir()
            await asyncio.to_thread(
                bridge.wait_event,
                lambda e: e["event"] == "warning" and "no kubelet socket" in e["message"],
            )
            await kubelet.start()
            await kubelet.wait_registered(GPU)
        finally:
            await kubelet.close()
            bridge.stop()

    asyncio.run(scenario())


def test_an_unhealthy_device_is_listed_unhealthy_and_not_allocated(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet, bridge = await started(k8s_root)
        try:
            gpu = await kubelet.wait_registered(GPU)
            await gpu.next_list(0)
            devices = k8s_root / "devices.toml"
            text = devices.read_text().replace(
                'id = "cuda1"\nnuma-node = 0', 'id = "cuda1"\nnuma-node = 0\nhealth = "unhealthy"'
            )
            devices.write_text(text)
            flipped = await gpu.next_list(1)
            assert ("cuda1", "Unhealthy", [0]) in flipped
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await gpu.allocate(["cuda1"])
            assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
            assert "unhealthy" in (refused.value.details() or "")
            cordon = bridge.accelkit("cordon", "cuda", "cuda2", "--reason", "fan")
            assert cordon.returncode == 0, cordon.stderr
            deadline = time.monotonic() + 15
            while ("cuda2", "Unhealthy", [1]) not in gpu.lists[-1]:
                assert time.monotonic() < deadline, gpu.lists
                await asyncio.sleep(0.05)
        finally:
            await kubelet.close()
            bridge.stop()

    asyncio.run(scenario())


def test_an_unknown_agent_or_a_node_without_devices_is_a_clear_error(k8s_root: Path) -> None:
    config = write_node(k8s_root)
    bridge = BridgeProcess.__new__(BridgeProcess)
    bridge.config = config
    bridge.env = {}
    result = bridge.accelkit("k8s-device-plugin", "--agent", "nope")
    assert result.returncode == 2
    assert "error: unknown agent 'nope' (agents: agent-1)" in result.stderr
    write_node(k8s_root, devices='[[kinds]]\nkey = "cpu"\n[[kinds.devices]]\nid = "0"\n')
    result = bridge.accelkit("k8s-device-plugin")
    assert result.returncode == 2
    assert "has no device the kubelet can schedule" in result.stderr
    for domain in (" ", "BAD DOMAIN!", "kubernetes.io"):  # what [bridge.k8s] domain refuses
        result = bridge.accelkit("k8s-device-plugin", "--domain", domain)
        assert result.returncode == 2
        assert "error: Invalid value for --domain: " in result.stderr
        assert "Traceback" not in result.stderr


def test_a_killed_bridge_leaves_bookings_that_any_accelkit_process_frees(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet, bridge = await started(k8s_root, grace="0.2")
        try:
            gpu = await kubelet.wait_registered(GPU)
            await gpu.allocate(["cuda0"])
            kubelet.pods = [("trainer", GPU, ["cuda0"])]
            bridge.process.kill()  # SIGKILL: no cleanup of any kind
            bridge.process.wait()
            await asyncio.sleep(0.5)
            # another accelkit process: the pod still holds it, so it stays booked
            [row] = await asyncio.to_thread(bridge.workloads)
            assert (row["workload"], row["liveness"]) == (f"k8s:{GPU}:cuda0", "running")
            run = await asyncio.to_thread(
                bridge.accelkit,
                "run",
                "--agent",
                "agent-1",
                "--slots",
                "cuda.device=4",
                "--",
                "true",
            )
            assert run.returncode != 0
            assert f"k8s:{GPU}:cuda0" in run.stderr
            kubelet.pods = []
            assert await asyncio.to_thread(bridge.workloads) == []  # finished and freed
            run = await asyncio.to_thread(
                bridge.accelkit,
                "run",
                "--agent",
                "agent-1",
                "--slots",
                "cuda.device=4",
                "--",
                "true",
            )
            assert run.returncode == 0, run.stderr
        finally:
            await kubelet.close()
            bridge.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize("value", ['"-1"', '"soon"', "0"])
def test_a_bad_kubelet_settle_is_refused_naming_file_and_key(k8s_root: Path, value: str) -> None:
    config = write_node(k8s_root)
    config.write_text(
        config.read_text().replace('kubelet-settle = "0.01"', f"kubelet-settle = {value}")
    )
    bridge = BridgeProcess.__new__(BridgeProcess)
    bridge.config = config
    bridge.env = {}
    result = bridge.accelkit("k8s-device-plugin")
    assert result.returncode == 2
    assert f"error: {config}:" in result.stderr
    assert "key 'bridge.k8s.kubelet-settle'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (k8s_root / "state").exists()


def test_a_device_held_before_the_bridge_starts_is_unhealthy_in_the_first_list(
    k8s_root: Path,
) -> None:
    async def scenario() -> None:
        kubelet = standin(k8s_root)
        await kubelet.start()
        config = write_node(k8s_root)
        runner = BridgeProcess.__new__(BridgeProcess)
        runner.config = config
        runner.env = cli_env()
        run = runner.popen_accelkit(
            "run", "--agent", "agent-1", "--slots", "cuda.device=1", "--", "sleep", "600"
        )
        bridge: BridgeProcess | None = None
        try:
            held = await asyncio.to_thread(runner.wait_run_workload)
            [device] = held["devices"]["cuda"]
            bridge = BridgeProcess(config)
            gpu = await kubelet.wait_registered(GPU)
            first = await gpu.next_list(0)
            assert [d[:2] for d in first if d[0] == device] == [(device, "Unhealthy")]
            assert {d[1] for d in first if d[0] != device} == {"Healthy"}
        finally:
            run.terminate()
            run.wait(timeout=60)
            await kubelet.close()
            if bridge is not None:
                bridge.stop()

    asyncio.run(scenario())
