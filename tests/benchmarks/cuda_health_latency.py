"""How fast an NVML health change reaches allocation, through the cuda plugin over the fake NVML.

A node of two fake GPUs watches health (``node.health_keeper.watching()``). ``lost``: from an XID 79
injected on ``cuda1`` to the agent's alloc map listing it as unavailable; it arrives as an NVML
event (``nvmlEventSetWait_v2`` in the plugin's thread), not by polling. ``regained``: the driver
asked for a GPU reset and the board shows it; from the recovery action reading NONE again to a
request for both GPUs being granted; this one is seen by the plugin's reading every
``health-interval`` seconds. Floors of the same run, with nothing of accelkit:
``event_floor`` a thread waiting on the same fake event set with the same 200 ms timeout and
handing each event to the event loop; ``poll_floor`` a task reading the recovery-action field
every ``health-interval`` seconds, the change made just after one of its reads. Run from the
repository root::

    .venv/bin/python tests/benchmarks/cuda_health_latency.py --rounds 20 --interval 0.05

Prints one JSON object: medians (ms) and each median over its floor.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

from accelkit import hookimpl
from accelkit.config import load_host_config
from accelkit.discovery import PluginLoader
from accelkit.node import Node
from accelkit.types import AgentId, DeviceId, DeviceName, SlotName
from accelkit_cuda import CUDAPlugin
from accelkit_cuda.events import WAIT_MS


def _load_fake() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "cuda" / "fake_nvml.py"
    spec = importlib.util.spec_from_file_location("fake_nvml", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fake_nvml"] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


fk = _load_fake()

HOST = """\
[resource]
reserved-cpu = 0
reserved-mem = "0"
state-dir = "{state}"
[plugins]
allowed = ["cuda"]
[plugins.config.cuda]
health-interval = "{interval}"
"""
CUDA = DeviceName("cuda")
BOTH = {SlotName("cuda.device"): Decimal(2)}
DEADLINE_S = 30.0


class FakeDistribution:
    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml

    @hookimpl
    def accelkit_compute_plugins(self, config: Mapping[str, Any]) -> Sequence[CUDAPlugin]:
        return [CUDAPlugin(config, nvml=self.nvml)]


async def until(condition: Callable[[], bool], what: str) -> float:
    """Seconds until ``condition()`` holds, looking after every turn of the event loop."""
    started = time.perf_counter()
    while not condition():
        if time.perf_counter() - started > DEADLINE_S:
            msg = f"{what} did not happen within {DEADLINE_S} s"
            raise TimeoutError(msg)
        await asyncio.sleep(0)
    return time.perf_counter() - started


async def accelkit_rounds(directory: Path, rounds: int, interval: float) -> dict[str, list[float]]:
    gpu = fk.FakeGpu(1)
    nvml = fk.FakeNVML([fk.FakeGpu(0), gpu])
    path = directory / "host.toml"
    path.write_text(HOST.format(state=directory / "state", interval=interval))
    config = load_host_config(path)
    loader = PluginLoader(config.plugins.with_environment())
    loader.register(FakeDistribution(nvml), "cuda")
    loader.build()
    lost: list[float] = []
    regained: list[float] = []
    async with Node.open(config, loader=loader) as node, node.health_keeper.watching():
        agent = node.agents[AgentId("agent-1")]
        alloc_map = agent.contexts[CUDA].alloc_map

        def excluded() -> bool:
            return DeviceId("cuda1") in alloc_map.unavailable_devices

        def granted() -> bool:
            try:
                allocation = agent.allocate(BOTH)
            except Exception:
                return False
            agent.free(allocation)
            return True

        def reason() -> str:
            return node.health.of(CUDA, DeviceId("cuda1")).reason

        await until(lambda: bool(nvml.event_sets and nvml.event_sets[0].registered), "events")
        for _ in range(rounds):
            await until(granted, "settling")
            nvml.inject_xid(gpu, 79)
            lost.append(await until(excluded, "exclusion"))
            gpu.recovery_action = fk.NVML_GPU_RECOVERY_ACTION_GPU_RESET
            await until(lambda: reason() == "recovery action GPU_RESET", "the reset asked")
            gpu.recovery_action = fk.NVML_GPU_RECOVERY_ACTION_NONE
            regained.append(await until(granted, "a grant"))
    return {"lost": lost, "regained": regained}


async def event_floor(rounds: int) -> list[float]:
    """The same fake event set waited on by a bare thread that hands events to the loop."""
    gpu = fk.FakeGpu(0)
    nvml = fk.FakeNVML([gpu])
    nvml.nvmlInit()
    event_set = nvml.nvmlEventSetCreate()
    nvml.nvmlDeviceRegisterEvents(gpu, fk.nvmlEventTypeXidCriticalError, event_set)
    loop = asyncio.get_running_loop()
    seen: list[int] = []
    stop = threading.Event()

    def wait() -> None:
        while not stop.is_set():
            try:
                data = nvml.nvmlEventSetWait_v2(event_set, WAIT_MS)
            except fk.NVMLError:
                continue
            loop.call_soon_threadsafe(seen.append, data.eventData)

    thread = threading.Thread(target=wait)
    thread.start()
    samples: list[float] = []
    try:
        for _ in range(rounds):
            before = len(seen)
            nvml.inject_xid(gpu, 79)
            samples.append(await until(lambda: len(seen) > before, "the floor's event"))  # noqa: B023
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        thread.join()
    return samples


async def poll_floor(rounds: int, interval: float) -> list[float]:
    """The recovery-action field read every ``interval`` s; changed just after a read."""
    gpu = fk.FakeGpu(0)
    nvml = fk.FakeNVML([gpu])
    nvml.nvmlInit()
    reads = [0]
    value = [0]

    async def poll() -> None:
        while True:
            fields = nvml.nvmlDeviceGetFieldValues(gpu, [fk.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
            value[0] = fields[0].value.uiVal
            reads[0] += 1
            await asyncio.sleep(interval)

    task = asyncio.create_task(poll())
    samples: list[float] = []
    try:
        for round_ in range(rounds * 2):
            before = reads[0]
            await until(lambda: reads[0] != before, "a read")  # noqa: B023
            gpu.recovery_action = round_ % 2
            samples.append(await until(lambda: value[0] == round_ % 2, "the change read"))  # noqa: B023
    finally:
        task.cancel()
    return samples


async def measure(directory: Path, rounds: int, interval: float) -> dict[str, object]:
    found = await accelkit_rounds(directory, rounds, interval)
    floors = {"lost": await event_floor(rounds), "regained": await poll_floor(rounds, interval)}
    result: dict[str, object] = {"rounds": rounds, "health_interval_s": interval}
    for name, samples in found.items():
        median = statistics.median(samples) * 1000
        floor = statistics.median(floors[name]) * 1000
        result[f"{name}_ms"] = round(median, 2)
        result[f"{name}_floor_ms"] = round(floor, 2)
        result[f"{name}_over_floor"] = round(median / floor, 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.05, help="health-interval, s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="accelkit-cuda-health-") as directory:
        figures = asyncio.run(measure(Path(directory), args.rounds, args.interval))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
