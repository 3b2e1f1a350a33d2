"""CPU metrics: node rates, workload cgroup and process-tree sums, process times."""

from __future__ import annotations

import asyncio
import os
import time
from collections import namedtuple
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.cgroup import CgroupFormatError, CgroupFS
from accelkit.metrics import MetricContext, MetricType
from accelkit.partition import DevicePartition
from accelkit.testing.fakehost import FakeHost, finish, spawn_python
from accelkit.types import AgentId, DeviceId, Workload
from accelkit_cpu import metrics
from accelkit_cpu.plugin import CPUAgentContext, CPUPlugin

Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def times(busy: float, idle: float) -> Times:
    # guest time is part of user time already; it must not be counted twice
    return Times(busy - 0.5, 0.25, 0.25, idle, 1.0, 0.0, 0.0, 0.0, 0.5, 0.0)


def test_busy_time_leaves_out_idle_iowait_and_guest() -> None:
    assert metrics.busy_msec(times(12.34, 100.0)) == Decimal("12340.00")


def test_node_metrics_become_rates_from_the_second_gather() -> None:
    ctx = MetricContext(timestamp=100.0)
    first = metrics.node_metrics(ctx, [times(10, 0), times(20, 0), times(30, 0)], [0, 2, 3], [0, 3])
    assert [m.key for m in first] == ["cpu_used"]
    assert first[0].type is MetricType.ACCUMULATION
    assert first[0].node.value == Decimal(40000)
    assert {k: m.value for k, m in first[0].per_device.items()} == {"0": 10000, "3": 30000}

    later = MetricContext(timestamp=102.0, previous=ctx.previous)
    used, util = metrics.node_metrics(
        later, [times(11, 0), times(99, 0), times(30.5, 0)], [0, 2, 3], [0, 3]
    )
    assert used.node.value == Decimal(41500)
    assert util.key == "cpu_util"
    assert util.type is MetricType.UTILIZATION
    assert util.per_device[DeviceId("0")].value == Decimal("50.00")  # 1 s busy over 2 s
    assert util.per_device[DeviceId("3")].value == Decimal("25.00")
    assert util.per_device[DeviceId("3")].capacity == 100
    assert (util.node.value, util.node.capacity) == (Decimal("75.00"), Decimal(200))


def test_a_counter_that_goes_backwards_reads_as_idle() -> None:
    ctx = MetricContext(timestamp=1.0)
    metrics.node_metrics(ctx, [times(10, 0)], [0], [0])
    _, util = metrics.node_metrics(MetricContext(2.0, ctx.previous), [times(5, 0)], [0], [0])
    assert util.node.value == 0


def test_online_cpus_map_psutil_records_to_core_numbers(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    assert metrics.online_cpus(tmp_path, 3) == (0, 1, 2)  # no file
    host.write("sys/devices/system/cpu/online", "0,2-3\n")
    assert metrics.online_cpus(tmp_path, 3) == (0, 2, 3)
    assert metrics.online_cpus(tmp_path, 2) == (0, 1)  # disagrees with psutil: trust the count
    host.write("sys/devices/system/cpu/online", "junk\n")
    assert metrics.online_cpus(tmp_path, 2) == (0, 1)


def fake_context(root: Path) -> CPUAgentContext:
    plugin = CPUPlugin({}, root=root, affinity=lambda: [0])
    asyncio.run(plugin.discover())
    context = plugin.create_agent_context(AgentId("a1"), DevicePartition.of("0"))
    assert isinstance(context, CPUAgentContext)
    return context


def gather(
    context: CPUAgentContext, workload_id: str, ctx: MetricContext | None = None
) -> dict[str, Decimal]:
    found = asyncio.run(
        context.gather_workload_metrics(ctx or MetricContext(), Workload.process_tree(workload_id))
    )
    for metric in found:
        assert metric.workload_id == workload_id
    return {m.key: m.value.value for m in found}


def test_workload_cpu_from_a_v1_cgroup(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v1("cpu,cpuacct", "/sys/fs/cgroup/cpu,cpuacct")
    host.write("sys/fs/cgroup/cpu,cpuacct/jobs/j1/cpuacct.usage", "2500000001\n")
    context = fake_context(tmp_path)
    assert gather(context, "cgroup:/jobs/j1") == {"cpu_used": Decimal("2500.000001")}
    assert gather(context, "cgroup:/jobs/gone") == {}


def test_workload_cpu_from_a_v2_cgroup_with_a_rate(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v2()
    stat = host.write("sys/fs/cgroup/jobs/j1/cpu.stat", "usage_usec 1500000\nuser_usec 1000000\n")
    context = fake_context(tmp_path)
    ctx = MetricContext(timestamp=10.0)
    assert gather(context, "cgroup:/jobs/j1", ctx) == {"cpu_used": Decimal(1500)}
    stat.write_text("usage_usec 2500000\n")
    later = MetricContext(timestamp=14.0, previous=ctx.previous)
    assert gather(context, "cgroup:/jobs/j1", later) == {
        "cpu_used": Decimal(2500),
        "cpu_util": Decimal("25.00"),
    }
    host.write("sys/fs/cgroup/jobs/j2/cpu.stat", "user_usec 5\n")
    assert gather(context, "cgroup:/jobs/j2") == {}


def test_workload_cpu_from_a_garbage_cgroup_is_a_clear_error(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v1("cpuacct", "/sys/fs/cgroup/cpuacct")
    host.write("sys/fs/cgroup/cpuacct/j/cpuacct.usage", "soon\n")
    with pytest.raises(CgroupFormatError, match=r"cpuacct.usage: expected a number"):
        gather(fake_context(tmp_path), "cgroup:/j")


def test_workload_cpu_sums_a_fake_process_tree(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.process(10, 1, children=[11], comm="a) (b", ticks=(100, 50, 7, 3))
    host.process(11, 10, children=[12], ticks=(40, 10, 0, 0))
    host.process(12, 11, ticks=(0, 0, 0, 0))
    host.write("proc/12/stat", "12 (short) S\n")  # truncated: the process is skipped
    context = fake_context(tmp_path)
    expected = Decimal(210 * 1000) / CLOCK_TICKS
    assert gather(context, "pid:10") == {"cpu_used": expected}
    assert gather(context, "11") == {"cpu_used": Decimal(50 * 1000) / CLOCK_TICKS}
    assert gather(context, "pid:12") == {}  # nothing readable
    assert gather(context, "pid:99") == {}  # gone


@pytest.mark.parametrize("workload_id", ["container-7", "pid:abc", "cgroup:relative"])
def test_workloads_that_cannot_be_located_have_no_metrics(tmp_path: Path, workload_id: str) -> None:
    assert gather(fake_context(tmp_path), workload_id) == {}


BURN = (
    "import sys\n"
    "def burn():\n"
    "    total = 0\n"
    "    for i in range(3_000_000):\n"
    "        total += i * i\n"
    "    return total\n"
    "burn()\n"
    "print('ready', flush=True)\n"
    "for line in sys.stdin:\n"
    "    burn()\n"
    "    print('again', flush=True)\n"
)


def real_context() -> CPUAgentContext:
    plugin = CPUPlugin({})
    asyncio.run(plugin.init())
    asyncio.run(plugin.discover())
    ids = [d.device_id for d in plugin.devices]
    context = plugin.create_agent_context(AgentId("a1"), DevicePartition(ids))
    assert isinstance(context, CPUAgentContext)
    return context


def test_a_real_child_process_tree() -> None:
    context = real_context()
    started = time.monotonic()
    child = spawn_python(BURN)
    try:
        assert child.stdout is not None
        assert child.stdin is not None
        assert child.stdout.readline() == "ready\n"
        ctx = MetricContext()
        first = gather(context, f"pid:{child.pid}", ctx)
        own = asyncio.run(context.gather_process_metrics(ctx, child.pid))
        elapsed = time.monotonic() - started
        assert first["cpu_used"] > 0
        # no more CPU time than every core could have given since the child started
        assert first["cpu_used"] <= Decimal(repr(elapsed)) * 1000 * os.cpu_count() + 20  # type: ignore[operator]
        [process_used] = [m for m in own if m.key == "cpu_used"]
        assert process_used.pid == child.pid
        assert process_used.value.value == first["cpu_used"]  # a single process: same figure

        child.stdin.write("more\n")
        child.stdin.flush()
        assert child.stdout.readline() == "again\n"
        second = gather(context, f"pid:{child.pid}", ctx.advance())
        assert second["cpu_used"] > first["cpu_used"]
        assert second["cpu_util"] > 0
    finally:
        finish(child)
    assert gather(context, f"pid:{child.pid}") == {}
    assert asyncio.run(context.gather_process_metrics(MetricContext(), child.pid)) == []


def test_a_real_cgroup() -> None:
    cgroups = CgroupFS.read()
    own = cgroups.process_directory("cpuacct")
    if own is None:
        pytest.skip("no cpu accounting cgroup here")
    path = next(
        m.path
        for m in cgroups.memberships()
        if ("cpuacct" in m.controllers if own.version == 1 else m.hierarchy_id == 0)
    )
    if own.version == 2 and own.read_keyed("cpu.stat") is None:
        pytest.skip("the root v2 cgroup has no cpu.stat")
    before = gather(real_context(), f"cgroup:{path}")["cpu_used"]
    burn = sum(i * i for i in range(300_000))
    after = gather(real_context(), f"cgroup:{path}")["cpu_used"]
    assert burn > 0
    assert 0 < before <= after


def test_real_node_metrics() -> None:
    context = real_context()
    plugin = context.plugin
    ctx = MetricContext()
    [used] = asyncio.run(plugin.gather_node_metrics(ctx))
    assert set(used.per_device) == {d.device_id for d in plugin.devices}
    assert used.node.value == sum(m.value for m in used.per_device.values())
    sum(i * i for i in range(300_000))
    later = asyncio.run(plugin.gather_node_metrics(ctx.advance()))
    util = {m.key: m for m in later}["cpu_util"]
    assert util.node.capacity == 100 * len(plugin.devices)
    assert all(m.value >= 0 and m.capacity == 100 for m in util.per_device.values())
