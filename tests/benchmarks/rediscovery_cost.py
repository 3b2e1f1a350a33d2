"""What a live rediscovery costs a running node, against asking the plugin alone.

A node of ``--gpus`` mock GPUs (SHARED mode, one agent) with half of them booked. Per round:

- ``unchanged``: ``node.rediscover()`` when the device file did not change;
- ``join``: ``node.rediscover()`` after one GPU was appended to the device file (new contexts
  over the widened mask, the booked allocations moved to the new map, the board told);
- ``floor``: the mock plugin's ``list_devices()`` alone after the same kind of change (reading
  and parsing the device file), in the same run: a rediscovery cannot be cheaper than that.

Run from the repository root::

    .venv/bin/python tests/benchmarks/rediscovery_cost.py --rounds 20 --gpus 64

Prints one JSON object: medians (ms) and each median over the floor's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from decimal import Decimal
from pathlib import Path

from accelkit.config import load_host_config
from accelkit.node import Node
from accelkit.types import AgentId, DeviceName, SlotName, Workload, WorkloadType

HOST = """\
[resource]
reserved-cpu = 0
reserved-mem = "0"
state-dir = "{state}"
[plugins]
allowed = ["mock"]
[plugins.config.mock]
config-file = "devices.toml"
"""

CUDA = DeviceName("cuda")
AGENT = AgentId("agent-1")


def write(devices: Path, count: int) -> None:
    lines = ["[[kinds]]", 'key = "cuda"']
    for i in range(count):
        lines += ["[[kinds.devices]]", f'id = "cuda{i}"', "numa-node = 0"]
    tmp = devices.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(devices)


async def measure(root: Path, gpus: int, rounds: int) -> dict[str, float]:
    (root / "host.toml").write_text(HOST.format(state=root / "state"))
    devices = root / "devices.toml"
    write(devices, gpus)
    config = load_host_config(root / "host.toml")
    unchanged: list[float] = []
    join: list[float] = []
    floor: list[float] = []
    async with Node.open(config) as node:
        for i in range(gpus // 2):
            workload = Workload(f"w{i}", WorkloadType.PROCESS_TREE)
            await node.book(AGENT, workload, {SlotName("cuda.device"): Decimal(1)})
        plugin = node.host.plugins[CUDA]
        count = gpus
        await node.rediscover()  # the first listing after start
        for _ in range(rounds):
            began = time.perf_counter()
            await node.rediscover()
            unchanged.append(time.perf_counter() - began)
            count += 1
            write(devices, count)
            began = time.perf_counter()
            await plugin.list_devices()
            floor.append(time.perf_counter() - began)
            count += 1
            write(devices, count)
            began = time.perf_counter()
            report = await node.rediscover()
            join.append(time.perf_counter() - began)
            assert len(report.plugins[CUDA].added) == 2
    medians = {
        "unchanged_ms": statistics.median(unchanged) * 1000,
        "join_ms": statistics.median(join) * 1000,
        "floor_ms": statistics.median(floor) * 1000,
    }
    medians["unchanged_over_floor"] = medians["unchanged_ms"] / medians["floor_ms"]
    medians["join_over_floor"] = medians["join_ms"] / medians["floor_ms"]
    return {k: round(v, 3) for k, v in medians.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--gpus", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(measure(Path(tmp), args.gpus, args.rounds))
    print(json.dumps({"gpus": args.gpus, "rounds": args.rounds, **result}))


if __name__ == "__main__":
    main()
