"""How fast a health change reaches allocation: file write → map excludes the device, and back.

A node of mock GPUs watches its device file (``health-interval`` seconds between looks, the
mock plugin's polling). Each round writes ``cuda1`` unhealthy into the TOML and measures until
the agent's alloc map lists it as unavailable (``lost``), then writes it healthy and measures
until a request for both GPUs is granted again (``regained``). The ``floor`` of the same run is
the same polling with nothing of accelkit: a task that looks at the file's ``stat`` every
``health-interval`` seconds, the file written just after one of its looks as accelkit's file
is (each write follows the previous detection), timed until it sees the change. Run from the
repository root::

    .venv/bin/python tests/benchmarks/health_latency.py --rounds 20 --interval 0.05

Last, ``cordon_check``: what a node pays before each booking to honour cordons set by other
processes when none changed (µs per check, median of 5 runs of 10,000), against ``os.stat`` of the
cordon file in the same run.

Prints one JSON object: medians (ms) of each figure, and each median over the floor's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from accelkit.config import load_host_config
from accelkit.node import Node
from accelkit.types import AgentId, DeviceId, DeviceName, SlotName

HOST = """\
[resource]
reserved-cpu = 0
reserved-mem = "0"
state-dir = "{state}"
[plugins]
allowed = ["mock"]
[plugins.config.mock]
config-file = "devices.toml"
health-interval = "{interval}"
"""

DEVICES = """\
[[kinds]]
key = "cuda"
[[kinds.devices]]
id = "cuda0"
[[kinds.devices]]
id = "cuda1"
health = "{state}"
"""

CUDA = DeviceName("cuda")
BOTH = {SlotName("cuda.device"): Decimal(2)}
DEADLINE_S = 30.0


def write(path: Path, state: str) -> None:
    """Replace the device file (as an editor or a config tool would), synced."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as out:
        out.write(DEVICES.format(state=state))
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)


async def until(condition: Callable[[], bool], what: str) -> float:
    """Seconds until ``condition()`` holds, looking after every turn of the event loop."""
    started = time.perf_counter()
    while not condition():
        if time.perf_counter() - started > DEADLINE_S:
            msg = f"{what} did not happen within {DEADLINE_S} s"
            raise TimeoutError(msg)
        await asyncio.sleep(0)
    return time.perf_counter() - started


class Poller:
    """The same polling without accelkit: ``stat`` the file every ``interval`` seconds."""

    def __init__(self, path: Path, interval: float) -> None:
        self.path = path
        self.interval = interval
        self.seen = self._signature()

    def _signature(self) -> tuple[int, int]:
        info = os.stat(self.path)
        return (info.st_ino, info.st_mtime_ns)

    async def run(self) -> None:
        while True:
            self.seen = self._signature()
            await asyncio.sleep(self.interval)


async def floor_round(poller: Poller, state: str) -> float:
    """From a write to the poller seeing it, written just after its last look (as for accelkit)."""
    before = poller.seen
    await until(lambda: poller.seen == before, "the poller's look")
    write(poller.path, state)
    return await until(lambda: poller.seen != before, "the poller seeing the write")


async def measure(directory: Path, rounds: int, interval: float) -> dict[str, object]:
    devices = directory / "devices.toml"
    write(devices, "healthy")
    config_path = directory / "host.toml"
    config_path.write_text(HOST.format(state=directory / "state", interval=interval))
    config = load_host_config(config_path)
    lost: list[float] = []
    regained: list[float] = []
    floor: list[float] = []
    async with Node.open(config) as node, node.health_keeper.watching():
        agent = node.agents[AgentId("agent-1")]
        alloc_map = agent.contexts[CUDA].alloc_map

        def excluded() -> bool:
            return DeviceId("cuda1") in getattr(alloc_map, "unavailable_devices", frozenset())

        def granted() -> bool:
            try:
                allocation = agent.allocate(BOTH)
            except Exception:
                return False
            agent.free(allocation)
            return True

        for _ in range(rounds):  # each write follows the previous detection at once
            await until(granted, "settling")
            write(devices, "unhealthy")
            lost.append(await until(excluded, "exclusion"))
            write(devices, "healthy")
            regained.append(await until(granted, "a grant"))
        node.health_keeper.cordon_file.cordon("cuda", "cuda0", "benchmark")
        check, stat = cordon_check(node)
    floor_file = directory / "floor.toml"
    write(floor_file, "healthy")
    poller = Poller(floor_file, interval)
    polling = asyncio.create_task(poller.run())
    try:
        for _ in range(rounds):
            floor.append(await floor_round(poller, "unhealthy"))
            floor.append(await floor_round(poller, "healthy"))
    finally:
        polling.cancel()
    floor_ms = statistics.median(floor) * 1000
    result: dict[str, object] = {
        "rounds": rounds,
        "health_interval_s": interval,
        "floor_ms": round(floor_ms, 2),
    }
    for name, samples in (("lost", lost), ("regained", regained)):
        median = statistics.median(samples) * 1000
        result[f"{name}_ms"] = round(median, 2)
        result[f"{name}_over_floor"] = round(median / floor_ms, 2)
    result["cordon_check_us"] = round(check, 3)
    result["stat_floor_us"] = round(stat, 3)
    result["cordon_check_over_floor"] = round(check / stat, 2)
    return result


def cordon_check(node: Node, calls: int = 10_000) -> tuple[float, float]:
    """µs per unchanged cordon check before a booking, and per ``os.stat`` of the file."""
    keeper = node.health_keeper
    keeper.sync_cordons()  # the cordon just written: read once
    path = keeper.cordon_file.path
    checks: list[float] = []
    stats: list[float] = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            keeper.sync_cordons()
        checks.append((time.perf_counter() - started) / calls * 1e6)
        started = time.perf_counter()
        for _ in range(calls):
            os.stat(path)
        stats.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(checks), statistics.median(stats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.05, help="health-interval, s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="accelkit-health-") as directory:
        figures = asyncio.run(measure(Path(directory), args.rounds, args.interval))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
