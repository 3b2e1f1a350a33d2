"""End to end: an XID in the (fake) NVML fences the GPU in a real node; a reset brings it back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.config import load_host_config
from accelkit.discovery import PluginLoader
from accelkit.errors import InsufficientResource
from accelkit.health import HealthState
from accelkit.node import Node
from accelkit.types import AgentId, DeviceName, SlotName, Workload, WorkloadType

from . import fake_nvml as fk
from .support import FakeCUDADistribution

CUDA = DeviceName("cuda")
AGENT = AgentId("agent-1")
ONE_GPU = {SlotName("cuda.device"): Decimal(1)}

_HOST = """\
[resource]
reserved-cpu = 0
reserved-mem = "0"
state-dir = "{state}"
[plugins]
allowed = ["cuda"]
[plugins.config.cuda]
health-interval = "0.05"
"""


def node_over(tmp_path: Path, nvml: fk.FakeNVML, sysfs: Path, cuda_config: str = "") -> Node:
    """A node of the cuda plugin over ``nvml``; ``cuda_config``: more ``[plugins.config.cuda]``
    lines."""
    path = tmp_path / "host.toml"
    path.write_text(_HOST.format(state=tmp_path / "state") + cuda_config)
    config = load_host_config(path)
    loader = PluginLoader(config.plugins.with_environment())
    loader.register(FakeCUDADistribution(nvml, sysfs), "cuda")
    loader.build()
    return Node.open(config, loader=loader)


async def book(node: Node, name: str) -> list[str]:
    record = await node.book(AGENT, Workload(name, WorkloadType.PROCESS_TREE), ONE_GPU)
    return sorted(record.allocation[CUDA][SlotName("cuda.device")])


async def until(check: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"not within 5 s: {what}")


def test_an_xid_fences_the_gpu_and_a_reset_brings_it_back(tmp_path: Path, sysfs: Path) -> None:
    gpu = fk.FakeGpu(0)
    nvml = fk.FakeNVML([gpu, fk.FakeGpu(1)])

    async def main() -> None:
        async with node_over(tmp_path, nvml, sysfs) as node, node.health_keeper.watching():
            await until(lambda: bool(nvml.event_sets and nvml.event_sets[0].registered), "events")
            nvml.inject_xid(gpu, 79)
            await until(lambda: not node.health.of(CUDA, "cuda0").allocatable, "cuda0 fenced")
            assert node.health.of(CUDA, "cuda0").reason == "XID 79: GPU has fallen off the bus"
            assert await book(node, "a") == ["cuda1"]
            with pytest.raises(InsufficientResource, match="cuda0"):
                await book(node, "b")
            # the driver asks for a reset, the reset is done: the GPU is granted again
            gpu.recovery_action = fk.NVML_GPU_RECOVERY_ACTION_GPU_RESET
            await until(
                lambda: node.health.of(CUDA, "cuda0").reason == "recovery action GPU_RESET",
                "the recovery action read",
            )
            gpu.recovery_action = fk.NVML_GPU_RECOVERY_ACTION_NONE
            await until(
                lambda: node.health.of(CUDA, "cuda0").state is HealthState.HEALTHY, "recovery"
            )
            assert await book(node, "c") == ["cuda0"]

    asyncio.run(main())
    (made,) = nvml.event_sets
    assert made.freed
