"""The device-plugin bridge offers whole slots only: the kubelet books whole devices.

The regression: a pod asking 1 ``accelkit.io/npu.shares`` booked all 4 shares of a card,
because every COUNT slot was taken for a slot of whole devices. Divisible slots reach
Kubernetes through the DRA driver instead.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from .bridge_process import BridgeProcess, write_node
from .kubelet_standin import KubeletStandIn

pytestmark = pytest.mark.slow  # real accelkit processes

#: one kind with whole cards and cards of 4 shares (a fraction map of quantum 1)
DEVICES = """\
[[kinds]]
key = "npu"
allocation = "fractional"
quantum = "1"
[[kinds.devices]]
id = "npu0"
slot = "device"
divisible = false
[[kinds.devices]]
id = "npu1"
slot = "device"
divisible = false
[[kinds.devices]]
id = "npu2"
amount = "4"
[[kinds.devices]]
id = "npu3"
amount = "4"
"""
WHOLE = "accelkit.io/npu.device"
SHARES = "accelkit.io/npu.shares"


def test_only_whole_slots_become_extended_resources(k8s_root: Path) -> None:
    async def scenario() -> None:
        kubelet = KubeletStandIn(
            k8s_root / "device-plugins", k8s_root / "pod-resources" / "kubelet.sock"
        )
        await kubelet.start()
        bridge = BridgeProcess(write_node(k8s_root, grace="600", devices=DEVICES))
        try:
            whole = await kubelet.wait_registered(WHOLE)
            # the first tick registers every resource before it reads PodResources
            await asyncio.to_thread(bridge.wait_event, lambda e: e["event"] == "pod-resources")
            registered = {e["resource"] for e in bridge.events if e["event"] == "registered"}
            assert registered == {WHOLE}
            assert {r.resource_name for r in kubelet.registrations} == {WHOLE}
            assert not (
                k8s_root / "device-plugins" / "accelkit-accelkit.io_npu.shares.sock"
            ).exists()
            assert [d[0] for d in await whole.next_list(0)] == ["npu0", "npu1"]

            await whole.allocate(["npu1"])
            [row] = bridge.workloads()
            assert row["devices"]["npu"] == ["npu1"]
            # the shares stay free for accelkit run (and the DRA driver): 2 of a card's 4
            run = bridge.accelkit("run", "--slots", "npu.shares=2", "--", "true")
            assert run.returncode == 0, run.stderr
        finally:
            await kubelet.close()
            code, err = bridge.stop()
        assert code == 0, err

    asyncio.run(scenario())
