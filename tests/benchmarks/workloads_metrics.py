"""Workload metrics of 200 live process trees: the cpu and mem plugins against a procfs floor.

Each tree is ``sh`` with two ``sleep`` children in its own session (600 processes in all),
spawned on the first trial and killed when the run ends. One operation gathers one workload's
metrics (``Workload("pid:<sh>")``). The ``floor`` rows read the same numbers with the least code
that can: walk ``/proc/<pid>/task/<tid>/children`` and add up ``stat`` / ``statm`` fields. The
``psutil`` row is the obvious psutil loop (``children(recursive=True)``), for scale.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable

import psutil
from harness import Trial, add

from accelkit.metrics import MetricContext
from accelkit.partition import DevicePartition, SlotPartition
from accelkit.plugin import AbstractAgentContext
from accelkit.types import AgentId, DeviceId, SlotName, Workload
from accelkit_cpu.plugin import CPUPlugin
from accelkit_mem.plugin import MemPlugin

TREES = 200
PAGE = os.sysconf("SC_PAGE_SIZE")
_trees: list[subprocess.Popen[bytes]] = []


def _kill_trees() -> None:
    for tree in _trees:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(tree.pid, signal.SIGKILL)
        tree.wait()
    _trees.clear()


def _leaders() -> list[int]:
    """The leader pids of the live trees, spawning them on first use."""
    if not _trees:
        atexit.register(_kill_trees)
        for _ in range(TREES):
            _trees.append(
                subprocess.Popen(
                    ["sh", "-c", "sleep 3600 & sleep 3600 & wait"], start_new_session=True
                )
            )
        # wait until every shell has forked both children
        while any(len(_floor_tree(t.pid)) < 3 for t in _trees):
            time.sleep(0.05)
    return [t.pid for t in _trees]


def _floor_tree(pid: int) -> list[int]:
    tree, index = [pid], 0
    while index < len(tree):
        current = tree[index]
        index += 1
        try:
            tids = os.listdir(f"/proc/{current}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{current}/task/{tid}/children", "rb") as f:
                    tree.extend(int(c) for c in f.read().split())
            except FileNotFoundError:
                continue
    return tree


def _floor_cpu(pid: int) -> int:
    ticks = 0
    for p in _floor_tree(pid):
        with open(f"/proc/{p}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rfind(b")") + 2 :].split()
        ticks += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return ticks


def _floor_mem(pid: int) -> int:
    rss = 0
    for p in _floor_tree(pid):
        with open(f"/proc/{p}/statm", "rb") as f:
            rss += int(f.read().split()[1]) * PAGE
    return rss


def _floor_both(pid: int) -> tuple[int, int]:
    ticks = rss = 0
    for p in _floor_tree(pid):
        with open(f"/proc/{p}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rfind(b")") + 2 :].split()
        ticks += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        with open(f"/proc/{p}/statm", "rb") as f:
            rss += int(f.read().split()[1]) * PAGE
    return ticks, rss


def _psutil_both(pid: int) -> tuple[float, int]:
    leader = psutil.Process(pid)
    cpu, rss = 0.0, 0
    for p in [leader, *leader.children(recursive=True)]:
        with p.oneshot():
            t = p.cpu_times()
            cpu += t.user + t.system + t.children_user + t.children_system
            rss += p.memory_info().rss
    return cpu, rss


def _contexts() -> tuple[AbstractAgentContext, AbstractAgentContext]:
    cpu, mem = CPUPlugin({}), MemPlugin({})
    for plugin in (cpu, mem):
        asyncio.run(plugin.init())
        asyncio.run(plugin.discover())
    cpu_ctx = cpu.create_agent_context(AgentId("bench"), DevicePartition.of("0"))
    size = mem.devices[0].memory_size
    mem_ctx = mem.create_agent_context(
        AgentId("bench"), SlotPartition({SlotName("mem"): size}, (DeviceId("root"),))
    )
    return cpu_ctx, mem_ctx


def _ours(which: str) -> Callable[[], Trial]:
    def run() -> Trial:
        leaders = _leaders()
        cpu_ctx, mem_ctx = _contexts()
        contexts = {"cpu": [cpu_ctx], "mem": [mem_ctx], "cpu+mem": [cpu_ctx, mem_ctx]}[which]
        workloads = [Workload.process_tree(f"pid:{pid}") for pid in leaders]
        ctx = MetricContext()

        async def gather_all() -> int:
            found = 0
            for workload in workloads:
                for context in contexts:
                    found += len(await context.gather_workload_metrics(ctx, workload))
            return found

        start = time.perf_counter()
        found = asyncio.run(gather_all())
        elapsed = time.perf_counter() - start
        if found != len(workloads) * len(contexts):
            msg = f"expected one metric per workload and plugin, got {found}"
            raise AssertionError(msg)
        return Trial(ops=len(workloads), seconds=elapsed)

    return run


def _floor(read: Callable[[int], object]) -> Callable[[], Trial]:
    def run() -> Trial:
        leaders = _leaders()
        start = time.perf_counter()
        for pid in leaders:
            read(pid)
        elapsed = time.perf_counter() - start
        return Trial(ops=len(leaders), seconds=elapsed)

    return run


add("M1.workload-metrics.cpu.ours", _ours("cpu"))
add("M1.workload-metrics.cpu.floor", _floor(_floor_cpu))
add("M1.workload-metrics.mem.ours", _ours("mem"))
add("M1.workload-metrics.mem.floor", _floor(_floor_mem))
add("M1.workload-metrics.cpu+mem.ours", _ours("cpu+mem"))
add("M1.workload-metrics.cpu+mem.floor", _floor(_floor_both))
add("M1.workload-metrics.cpu+mem.psutil-children", _floor(_psutil_both))
