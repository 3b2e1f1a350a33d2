"""The Kubernetes bridge over the cuda plugin on the fake NVML, with the kubelet stand-in (not a
real kubelet): GPUs listed with NUMA nodes, Allocate answers NVIDIA envs and device nodes, an
XID turns a GPU Unhealthy in ListAndWatch."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import shutil
import sys
import tempfile
from decimal import Decimal
from pathlib import Path

from accelkit.bridge.k8s.bridge import K8sBridge
from accelkit.config.model import K8sBridgeConfig
from accelkit.types import AgentId

from . import fake_nvml as fk
from .test_node_health import node_over, until

STANDIN = Path(__file__).resolve().parents[1] / "bridge" / "k8s" / "kubelet_standin.py"
GPU = "accelkit.io/cuda.device"


def _standin_module():  # the stand-in lives with the bridge tests
    spec = importlib.util.spec_from_file_location("kubelet_standin", STANDIN)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("kubelet_standin", module)
    spec.loader.exec_module(module)
    return module


def test_gpus_on_the_fake_nvml_through_the_bridge(tmp_path: Path, sysfs: Path) -> None:
    gpu = fk.FakeGpu(0)
    nvml = fk.FakeNVML([gpu, fk.FakeGpu(1)])
    root = Path(tempfile.mkdtemp(prefix="ak8s-", dir="/tmp"))
    standin = _standin_module()

    async def main() -> None:
        kubelet = standin.KubeletStandIn(root / "dp", root / "pr" / "kubelet.sock")
        await kubelet.start()
        settings = K8sBridgeConfig(
            kubelet_dir=root / "dp",
            pod_resources_socket=root / "pr" / "kubelet.sock",
            release_interval=Decimal("0.1"),
        )
        async with node_over(tmp_path, nvml, sysfs) as node:
            bridge = K8sBridge(node, AgentId("agent-1"), settings)
            assert [r.name for r in bridge.resources] == [GPU]
            task = asyncio.ensure_future(bridge.run())
            try:
                plugin = await kubelet.wait_registered(GPU)
                first = await plugin.next_list(0)
                assert [(d[0], d[1]) for d in first] == [("cuda0", "Healthy"), ("cuda1", "Healthy")]
                reply = await plugin.allocate(["cuda1"])
                [container] = reply.container_responses
                assert container.envs  # the cuda plugin's NVIDIA variables
                assert "cuda1" in container.annotations["io.accelkit.workload"]
                await until(
                    lambda: bool(nvml.event_sets and nvml.event_sets[0].registered), "events"
                )
                nvml.inject_xid(gpu, 79)
                seen = len(plugin.lists)
                while ("cuda0", "Unhealthy") not in [(d[0], d[1]) for d in plugin.lists[-1]]:
                    await plugin.next_list(seen)
                    seen += 1
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await kubelet.close()

    try:
        asyncio.run(main())
    finally:
        shutil.rmtree(root, ignore_errors=True)
