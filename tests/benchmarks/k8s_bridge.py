"""The Kubernetes bridge through the kubelet stand-in: Allocate latency, ListAndWatch update
latency after a health flip, and devices granted twice next to a concurrent ``accelkit run`` loop.

The bridge runs as a real ``accelkit k8s-device-plugin`` process over a node of mock GPUs; the
kubelet stand-in of the tests (``tests/bridge/k8s/kubelet_standin.py``, not a real kubelet)
registers it and makes the calls. Run from the repository root::

    .venv/bin/python tests/benchmarks/k8s_bridge.py --allocations 200 --flips 20 --runs 30

- ``allocate``: ``Allocate`` of one GPU, each call a GPU not booked yet (a node of
  ``--allocations`` GPUs), median and p95 in ms; the ``floor`` of the same run is
  ``GetDevicePluginOptions`` on the same channel (the gRPC round trip with no work).
- ``list_and_watch``: from writing a GPU unhealthy (or healthy again) into the mock's device
  file until the stand-in receives the list that says so; the mock looks at its file every
  ``--interval`` seconds. Its floor is the same polling with nothing of accelkit (a task that
  stats the file every ``--interval`` seconds, timed from the write until it sees it).
- ``granted_twice``: a node of 4 GPUs; the stand-in allocates each GPU in a random order (the
  pods keep them: PodResources lists them) while ``accelkit run --slots cuda.device=1`` loops
  in another process, printing the GPU it got. A GPU counts twice when a run held it at any
  moment after the bridge's ``Allocate`` of it answered. Must be 0.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bridge" / "k8s"))

from bridge_process import ACCELKIT, BridgeProcess  # noqa: E402
from kubelet_standin import KubeletStandIn  # noqa: E402

GPU = "accelkit.io/cuda.device"

HOST = """\
[resource]
reserved-cpu = 0
reserved-mem = "0"
state-dir = "{root}/state"
[plugins]
allowed = ["mock"]
[plugins.config.mock]
config-file = "devices.toml"
health-interval = "{interval}"
[bridge.k8s]
kubelet-dir = "{root}/device-plugins"
pod-resources-socket = "{root}/pod-resources/kubelet.sock"
release-interval = "1"
admission-grace = "600"
"""


def devices(count: int, unhealthy: frozenset[int] = frozenset()) -> str:
    lines = ["[[kinds]]", 'key = "cuda"']
    for i in range(count):
        lines += ["[[kinds.devices]]", f'id = "cuda{i}"', f"numa-node = {i % 2}"]
        if i in unhealthy:
            lines.append('health = "unhealthy"')
    return "\n".join(lines) + "\n"


def write(path: Path, text: str) -> None:
    temp = path.with_suffix(".tmp")
    temp.write_text(text)
    temp.replace(path)


def node(root: Path, gpus: int, interval: float) -> Path:
    write(root / "devices.toml", devices(gpus))
    config = root / "host.toml"
    config.write_text(HOST.format(root=root, interval=interval))
    return config


def ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"median_ms": round(statistics.median(ordered) * 1e3, 3), "p95_ms": round(p95 * 1e3, 3)}


async def allocate_latency(root: Path, calls: int, interval: float) -> dict[str, Any]:
    kubelet = KubeletStandIn(root / "device-plugins", root / "pod-resources" / "kubelet.sock")
    await kubelet.start()
    bridge = BridgeProcess(node(root, calls, interval))
    try:
        plugin = await kubelet.wait_registered(GPU)
        await plugin.next_list(0)
        floor: list[float] = []
        took: list[float] = []
        for i in range(calls):
            start = time.perf_counter()
            await plugin.options()
            floor.append(time.perf_counter() - start)
            start = time.perf_counter()
            await plugin.allocate([f"cuda{i}"])
            took.append(time.perf_counter() - start)
        result = {"calls": calls, "allocate": ms(took), "floor": ms(floor)}
        result["ratio_median"] = round(
            result["allocate"]["median_ms"] / result["floor"]["median_ms"], 1
        )
        return result
    finally:
        await kubelet.close()
        bridge.stop()


async def _polled(path: Path, interval: float, before: int, written: list[float]) -> float:
    deadline = time.monotonic() + 10
    while path.stat().st_mtime_ns == before and time.monotonic() < deadline:
        await asyncio.sleep(interval)
    return time.perf_counter() - written[0]


async def health_latency(root: Path, flips: int, interval: float) -> dict[str, Any]:
    kubelet = KubeletStandIn(root / "device-plugins", root / "pod-resources" / "kubelet.sock")
    await kubelet.start()
    bridge = BridgeProcess(node(root, 2, interval))
    file = root / "devices.toml"
    try:
        plugin = await kubelet.wait_registered(GPU)
        await plugin.next_list(0)
        took: list[float] = []
        floor: list[float] = []
        for flip in range(flips):
            sick = flip % 2 == 0
            seen = len(plugin.lists)
            start = time.perf_counter()
            write(file, devices(2, frozenset({1}) if sick else frozenset()))
            while True:
                listed = await plugin.next_list(seen)
                seen += 1
                if (listed[1][1] == "Unhealthy") == sick:
                    break
            took.append(plugin.list_times[seen - 1] - start)
            # the floor: the same write seen by plain polling at the same interval
            await asyncio.sleep(interval * random.random())
            written = [time.perf_counter()]
            poll = asyncio.ensure_future(_polled(file, interval, file.stat().st_mtime_ns, written))
            await asyncio.sleep(interval * random.random())  # written between two looks
            written[0] = time.perf_counter()
            write(file, devices(2, frozenset({1}) if sick else frozenset()))
            floor.append(await poll)
            await asyncio.sleep(interval * 2)  # the bridge saw this rewrite (no change) too
        result = {"flips": flips, "interval_s": interval, "update": ms(took), "floor": ms(floor)}
        result["ratio_median"] = round(
            result["update"]["median_ms"] / result["floor"]["median_ms"], 2
        )
        return result
    finally:
        await kubelet.close()
        bridge.stop()


def _run_loop(config: Path, runs: int, out: list[tuple[float, float, str]]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKIT_")}
    for _ in range(runs):
        start = time.time()
        done = subprocess.run(
            [
                *ACCELKIT,
                "run",
                "--config",
                str(config),
                "--agent",
                "agent-1",
                "--slots",
                "cuda.device=1",
                "--",
                "sh",
                "-c",
                'echo "$MOCK_CUDA_DEVICES"; sleep 0.05',
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if done.returncode == 0:
            out.append((start, time.time(), done.stdout.strip()))


async def granted_twice(root: Path, runs: int) -> dict[str, Any]:
    kubelet = KubeletStandIn(root / "device-plugins", root / "pod-resources" / "kubelet.sock")
    await kubelet.start()
    config = node(root, 4, 1.0)
    bridge = BridgeProcess(config)
    try:
        plugin = await kubelet.wait_registered(GPU)
        await plugin.next_list(0)
        ran: list[tuple[float, float, str]] = []
        loop = asyncio.ensure_future(asyncio.to_thread(_run_loop, config, runs, ran))
        granted: dict[str, float] = {}
        refused = 0
        order = [f"cuda{i}" for i in range(4)]
        random.shuffle(order)
        for device in order:
            await asyncio.sleep(random.uniform(0.2, 0.8))
            try:
                await plugin.allocate([device])
            except Exception:
                refused += 1  # a run holds it: the kubelet would pick another
                continue
            granted[device] = time.time()
            kubelet.pods.append((f"pod-{device}", GPU, [device]))
        await loop
        twice = sum(1 for _start, end, device in ran if device in granted and end > granted[device])
        return {
            "runs_completed": len(ran),
            "bridge_granted": len(granted),
            "bridge_refused_busy": refused,
            "granted_twice": twice,
        }
    finally:
        await kubelet.close()
        bridge.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--allocations", type=int, default=200)
    parser.add_argument("--flips", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()

    async def every() -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name, job in (
            ("allocate", lambda r: allocate_latency(r, args.allocations, args.interval)),
            ("list_and_watch", lambda r: health_latency(r, args.flips, args.interval)),
            ("granted_twice", lambda r: granted_twice(r, args.runs)),
        ):
            with tempfile.TemporaryDirectory(prefix="ak8s-", dir="/tmp") as root:
                print(f"{name} ...", file=sys.stderr, flush=True)
                found[name] = await job(Path(root))
        return found

    print(json.dumps(asyncio.run(every()), indent=2))


if __name__ == "__main__":
    main()
