"""CPU time of the node's cores, of workloads and of processes, as exact decimals.

Node metrics come from ``psutil.cpu_times(percpu=True)``; a workload's CPU time comes from its
cgroup (v1 ``cpuacct.usage``, v2 ``cpu.stat`` ``usage_usec``) or, for a process tree, from the
sum of ``/proc/<pid>/stat`` over the tree; a process's from ``psutil.Process.cpu_times()``.
Utilisation is the rate of CPU time between two gathers, so it appears from the second one on.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import psutil

from accelkit import (
    CgroupFS,
    Measurement,
    MetricContext,
    MetricType,
    NodeMetric,
    ProcessMetric,
    WorkloadLocation,
    WorkloadMetric,
    process_tree,
    round_process_tree,
)
from accelkit.types import DeviceId
from accelkit_cpu.cpulist import parse_cpu_list

USED_KEY = "cpu_used"
UTIL_KEY = "cpu_util"
_MSEC = "msec"
_PERCENT = "percent"
_HUNDRED = Decimal(100)
_CENT = Decimal("0.01")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _decimal(seconds: float) -> Decimal:
    """A psutil float of seconds as the decimal it prints as (psutil rounds ticks to floats)."""
    return Decimal(repr(seconds))


def busy_msec(times: Any) -> Decimal:
    """Non-idle time of a ``psutil`` per-cpu record in milliseconds.

    Guest time is already counted in user time, so it is left out; idle and iowait are idle.
    """
    busy = Decimal(0)
    for field in times._fields:
        if field not in ("idle", "iowait", "guest", "guest_nice"):
            busy += _decimal(getattr(times, field))
    return busy * 1000


def _util(ctx: MetricContext, key: str, used_msec: Decimal) -> Decimal | None:
    """Percent of one core used since the previous gather (msec per second / 10)."""
    rate = ctx.rate(key, used_msec)
    if rate is None:
        return None
    return max(rate / 10, Decimal(0)).quantize(_CENT)


def node_metrics(
    ctx: MetricContext, per_cpu: Sequence[Any], cpu_ids: Sequence[int], cores: Iterable[int]
) -> list[NodeMetric]:
    """``cpu_used`` and (from the second gather on) ``cpu_util`` of ``cores``.

    ``per_cpu[i]`` is the record of core ``cpu_ids[i]``; the node figure sums ``cores``.
    """
    by_core = dict(zip(cpu_ids, per_cpu, strict=False))
    used = {core: busy_msec(by_core[core]) for core in cores if core in by_core}
    metrics = [
        NodeMetric(
            USED_KEY,
            MetricType.ACCUMULATION,
            _MSEC,
            Measurement(sum(used.values(), Decimal(0))),
            {DeviceId(str(core)): Measurement(value) for core, value in used.items()},
        )
    ]
    utils = {core: _util(ctx, f"cpu:node:{core}", value) for core, value in used.items()}
    known = {core: value for core, value in utils.items() if value is not None}
    if known:
        metrics.append(
            NodeMetric(
                UTIL_KEY,
                MetricType.UTILIZATION,
                _PERCENT,
                Measurement(sum(known.values(), Decimal(0)), _HUNDRED * len(known)),
                {DeviceId(str(c)): Measurement(v, _HUNDRED) for c, v in known.items()},
            )
        )
    return metrics


def process_cpu_ticks(pid: int, *, root: Path) -> int | None:
    """User + system time of a process and of its reaped children, in clock ticks."""
    try:  # a string path: this runs once per process per gather, and pathlib costs more
        with open(f"{os.fspath(root)}/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        # utime, stime, cutime, cstime are fields 14-17 of stat(5); 0-based 11-14 after "comm"
        return int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    except (IndexError, ValueError):
        return None


def cgroup_cpu_msec(cgroups: CgroupFS, cgroup_path: str) -> Decimal | None:
    """CPU time used by a cgroup in milliseconds (v1 ``cpuacct.usage``, v2 ``usage_usec``)."""
    cgroup = cgroups.directory("cpuacct", cgroup_path)
    if cgroup is None:
        return None
    if cgroup.version == 1:
        nanoseconds = cgroup.read_int("cpuacct.usage")
        return None if nanoseconds is None else Decimal(nanoseconds) / 1_000_000
    usec = (cgroup.read_keyed("cpu.stat") or {}).get("usage_usec")
    return None if usec is None else Decimal(usec) / 1000


def tree_cpu_msec(pid: int, *, root: Path, ctx: MetricContext | None = None) -> Decimal | None:
    """CPU time used by process ``pid``, its descendants and their reaped children, in msec.

    With ``ctx``, the process tree is read once per gather round for every plugin.
    """
    tree = process_tree(pid, root=root) if ctx is None else round_process_tree(ctx, pid, root=root)
    ticks = [process_cpu_ticks(p, root=root) for p in tree]
    found = [t for t in ticks if t is not None]
    if not found:
        return None
    return Decimal(sum(found) * 1000) / _CLOCK_TICKS


def workload_cpu_msec(
    location: WorkloadLocation, *, cgroups: CgroupFS, root: Path, ctx: MetricContext | None = None
) -> Decimal | None:
    """CPU time used by a workload in milliseconds, or ``None`` when it cannot be found."""
    if location.cgroup_path is not None:
        return cgroup_cpu_msec(cgroups, location.cgroup_path)
    if location.pid is not None:
        return tree_cpu_msec(location.pid, root=root, ctx=ctx)
    return None


def workload_metrics(
    ctx: MetricContext, workload_id: str, used_msec: Decimal
) -> list[WorkloadMetric]:
    """``cpu_used`` and (from the second gather on) ``cpu_util`` of one workload."""
    metrics = [
        WorkloadMetric(
            USED_KEY, MetricType.ACCUMULATION, _MSEC, workload_id, Measurement(used_msec)
        )
    ]
    util = _util(ctx, f"cpu:workload:{workload_id}", used_msec)
    if util is not None:
        metrics.append(
            WorkloadMetric(
                UTIL_KEY, MetricType.UTILIZATION, _PERCENT, workload_id, Measurement(util)
            )
        )
    return metrics


def process_metrics(ctx: MetricContext, pid: int) -> list[ProcessMetric]:
    """``cpu_used`` (user + system) and ``cpu_util`` of one process; ``[]`` when it is gone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
    used = (_decimal(times.user) + _decimal(times.system)) * 1000
    metrics = [ProcessMetric(USED_KEY, MetricType.ACCUMULATION, _MSEC, pid, Measurement(used))]
    util = _util(ctx, f"cpu:process:{pid}", used)
    if util is not None:
        metrics.append(
            ProcessMetric(UTIL_KEY, MetricType.UTILIZATION, _PERCENT, pid, Measurement(util))
        )
    return metrics


def online_cpus(root: Path, count: int) -> tuple[int, ...]:
    """The core number of each ``psutil`` per-cpu record: ``/sys/devices/system/cpu/online``
    when it lists ``count`` cores, else ``0 .. count-1``."""
    try:
        online = parse_cpu_list((root / "sys/devices/system/cpu/online").read_text())
    except (FileNotFoundError, ValueError):
        online = ()
    return online if len(online) == count else tuple(range(count))
