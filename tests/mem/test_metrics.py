"""Memory metrics: node used / total, workload cgroup and process-tree sums, process RSS."""

from __future__ import annotations

import asyncio
import os
from decimal import Decimal
from pathlib import Path

import psutil
import pytest

from accelkit.cgroup import CgroupFormatError, CgroupFS
from accelkit.metrics import MetricContext, MetricType
from accelkit.partition import SlotPartition
from accelkit.testing.fakehost import FakeHost, finish, spawn_python
from accelkit.types import AgentId, DeviceId, SlotName, Workload
from accelkit_mem.plugin import MemAgentContext, MemPlugin

MiB = 2**20
PAGE = os.sysconf("SC_PAGE_SIZE")


def context_for(plugin: MemPlugin) -> MemAgentContext:
    asyncio.run(plugin.discover())
    share = plugin.devices[0].memory_size
    partition = SlotPartition({SlotName("mem"): share}, (DeviceId("root"),))
    context = plugin.create_agent_context(AgentId("a1"), partition)
    assert isinstance(context, MemAgentContext)
    return context


def gather(context: MemAgentContext, workload_id: str) -> dict[str, Decimal]:
    found = asyncio.run(
        context.gather_workload_metrics(MetricContext(), Workload.process_tree(workload_id))
    )
    for metric in found:
        assert (metric.workload_id, metric.type, metric.unit) == (workload_id, "gauge", "bytes")
    return {m.key: m.value.value for m in found}


def test_v1_workload_working_set(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v1("memory", "/sys/fs/cgroup/memory")
    host.write("sys/fs/cgroup/memory/j/memory.usage_in_bytes", "1000\n")
    host.write("sys/fs/cgroup/memory/j/memory.stat", "inactive_file 1\ntotal_inactive_file 300\n")
    host.write("sys/fs/cgroup/memory/k/memory.usage_in_bytes", "500\n")  # no memory.stat
    host.write("sys/fs/cgroup/memory/l/memory.usage_in_bytes", "100\n")
    host.write("sys/fs/cgroup/memory/l/memory.stat", "total_inactive_file 300\n")
    context = context_for(MemPlugin({}, root=tmp_path, ram=lambda: 10**9))
    assert gather(context, "cgroup:/j") == {"mem": 700}
    assert gather(context, "cgroup:/k") == {"mem": 500}
    assert gather(context, "cgroup:/l") == {"mem": 0}  # never negative
    assert gather(context, "cgroup:/gone") == {}


def test_v2_workload_working_set(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v2()
    host.write("sys/fs/cgroup/a/b/memory.current", "8192\n")
    host.write("sys/fs/cgroup/a/b/memory.stat", "anon 4096\ninactive_file 1024\n")
    context = context_for(MemPlugin({}, root=tmp_path, ram=lambda: 10**9))
    assert gather(context, "cgroup:/a/b") == {"mem": 7168}


def test_garbage_workload_cgroup_is_a_clear_error(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v2()
    host.write("sys/fs/cgroup/a/memory.current", "8192\n")
    host.write("sys/fs/cgroup/a/memory.stat", "inactive_file many\n")
    context = context_for(MemPlugin({}, root=tmp_path, ram=lambda: 10**9))
    with pytest.raises(CgroupFormatError, match=r"a/memory.stat: expected 'key number' lines"):
        gather(context, "cgroup:/a")


def test_fake_process_tree_sums_resident_sets(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.process(10, 1, children=[11, 12], rss_pages=100)
    host.process(11, 10, rss_pages=20)
    host.process(12, 10, rss_pages=3)
    host.write("proc/12/statm", "garbage\n")  # unreadable: skipped
    context = context_for(MemPlugin({}, root=tmp_path, ram=lambda: 10**9))
    assert gather(context, "pid:10") == {"mem": 120 * PAGE}
    assert gather(context, "12") == {}
    assert gather(context, "pid:77") == {}
    assert gather(context, "not-a-workload-id") == {}


def test_node_metrics_with_a_cgroup_limit(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v2()
    host.member("0::/agent")
    host.write("sys/fs/cgroup/agent/memory.max", "4096000\n")
    host.write("sys/fs/cgroup/agent/memory.current", "1000\n")
    host.write("sys/fs/cgroup/agent/memory.stat", "inactive_file 400\n")
    plugin = MemPlugin({}, root=tmp_path, ram=lambda: 10**12)
    [metric] = asyncio.run(plugin.gather_node_metrics(MetricContext()))
    vm = psutil.virtual_memory()
    assert (metric.key, metric.type, metric.unit) == ("mem", MetricType.GAUGE, "bytes")
    assert metric.node.capacity == vm.total
    assert metric.per_device == {"root": metric.per_device["root"]}
    assert (metric.per_device["root"].value, metric.per_device["root"].capacity) == (600, 4096000)


def real_context() -> MemAgentContext:
    plugin = MemPlugin({})
    asyncio.run(plugin.init())
    return context_for(plugin)


def test_real_node_metrics() -> None:
    context = real_context()
    [metric] = asyncio.run(context.plugin.gather_node_metrics(MetricContext()))
    assert metric.node.capacity == psutil.virtual_memory().total
    assert 0 < metric.node.value < metric.node.capacity  # type: ignore[operator]
    assert metric.per_device["root"].capacity == context.plugin.devices[0].memory_size


HOLD_100_MIB = (
    "import sys\n"
    "block = b'x' * (100 * 2**20)  # written, so every page is resident\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


def test_a_real_child_holding_100_mib() -> None:
    context = real_context()
    idle = spawn_python("import sys\nprint('ready', flush=True)\nsys.stdin.read()\n")
    child = spawn_python(HOLD_100_MIB)
    try:
        for process in (idle, child):
            assert process.stdout is not None
            assert process.stdout.readline() == "ready\n"
        used = gather(context, f"pid:{child.pid}")["mem"]
        baseline = gather(context, f"pid:{idle.pid}")["mem"]
        assert used - baseline >= 95 * MiB  # the block, give or take allocator slack
        assert used < 400 * MiB  # and not wildly more
        [process] = asyncio.run(context.gather_process_metrics(MetricContext(), child.pid))
        assert (process.key, process.pid) == ("mem", child.pid)
        assert process.value.value == used  # one process: the tree is that process
        # the tree of this test process includes the child
        assert gather(context, f"pid:{os.getpid()}")["mem"] >= used
    finally:
        finish(child)
        finish(idle)
    assert gather(context, f"pid:{child.pid}") == {}
    assert asyncio.run(context.gather_process_metrics(MetricContext(), child.pid)) == []


def test_a_real_memory_cgroup() -> None:
    cgroups = CgroupFS.read()
    own = cgroups.process_directory("memory")
    if own is None:
        pytest.skip("no memory cgroup here")
    path = next(
        m.path
        for m in cgroups.memberships()
        if ("memory" in m.controllers if own.version == 1 else m.hierarchy_id == 0)
    )
    usage_file = "memory.usage_in_bytes" if own.version == 1 else "memory.current"
    before = own.read_int(usage_file)
    if before is None:
        pytest.skip("this cgroup does not account memory")
    used = gather(real_context(), f"cgroup:{path}")["mem"]
    after = own.read_int(usage_file) or 0
    # the working set is the charge less reclaimable cache: never above the charge
    assert 0 < used <= max(before, after)
