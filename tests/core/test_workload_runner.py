"""The process-tree runner in-process: affinity and memory limit reach the command."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from decimal import Decimal

import pytest

from accelkit.config import load_host_config
from accelkit.errors import WorkloadError
from accelkit.node import Node
from accelkit.types import AgentId, SlotName, WorkloadConfig
from accelkit.workload import Ledger
from accelkit.workload.memlimit import LimitMethod, MemoryLimit, choose_memory_limit
from accelkit.workload.runner import run_workload
from accelkit_mock.plugin import MockLifecycleHook

PROBE = """
import json, os, resource, sys
print(json.dumps({"cpus": sorted(os.sched_getaffinity(0)),
                  "rlimit": resource.getrlimit(resource.RLIMIT_AS)[0],
                  "env": os.environ.get("MOCK_CPU_DEVICES")}))
"""


@pytest.fixture
def config(mock_node):
    return load_host_config(mock_node(cpus=1, mem="4G"))


def test_affinity_and_memory_limit_reach_the_command(config, monkeypatch, tmp_path, capfd):
    original = MockLifecycleHook.pre_create

    async def pre_create(self):
        base = await original(self)
        if self.key == "cpu":
            return WorkloadConfig(env_vars=base.env_vars, cpuset_cpus=[0])
        if self.key == "mem":
            return WorkloadConfig(env_vars=base.env_vars, memory_limit=2 * 1024**3)
        return base

    monkeypatch.setattr(MockLifecycleHook, "pre_create", pre_create)
    lines: list[str] = []
    steps: list[str] = []

    async def main():
        async with Node.open(config) as host:
            keeper = host.bookkeeper
            slots = {SlotName("cpu"): Decimal(1), SlotName("mem"): Decimal(2 * 1024**3)}
            return await run_workload(
                keeper,
                AgentId("agent-1"),
                slots,
                [sys.executable, "-c", PROBE],
                checkpoint=steps.append,
                echo=lines.append,
            )

    assert asyncio.run(main()) == 0
    seen = json.loads(capfd.readouterr().out)
    assert seen["cpus"] == [0]
    assert seen["env"] == "0"
    said = "\n".join(lines)
    assert "cpu affinity [0]" in said
    assert "memory limit 2G through" in said
    if "RLIMIT_AS" in said:
        assert seen["rlimit"] == 2 * 1024**3
    assert steps == [
        "booked",
        "pre_create:cpu",
        "pre_create:mem",
        "prepared",
        "spawned",
        "post_create:cpu",
        "post_create:mem",
        "running",
        "exited",
        "pre_terminate:mem",
        "pre_terminate:cpu",
        "post_terminate:mem",
        "post_terminate:cpu",
        "released",
    ]
    assert Ledger(config.resource.state_dir).read_all() == {}


def _fake_root(tmp_path, *, v2=True, make_dir=True):
    root = tmp_path / "root"
    (root / "proc" / "self").mkdir(parents=True)
    fstype = "cgroup2 cgroup2 rw" if v2 else "cgroup cgroup rw,memory"
    point = "/sys/fs/cgroup" if v2 else "/sys/fs/cgroup/memory"
    (root / "proc" / "self" / "mountinfo").write_text(
        f"30 25 0:26 / {point} rw,nosuid - {fstype}\n"
    )
    (root / "proc" / "self" / "cgroup").write_text(
        "0::/user.slice/job\n" if v2 else "4:memory:/user.slice/job\n"
    )
    if make_dir:
        (root / point.lstrip("/") / "user.slice" / "job").mkdir(parents=True)
    return root


def test_memory_limit_uses_a_cgroup_v2_child_when_it_can(tmp_path):
    root = _fake_root(tmp_path)
    chosen = choose_memory_limit(1024**3, "pid:42", root=root)
    assert chosen.method is LimitMethod.CGROUP
    assert chosen.cgroup_dir == root / "sys/fs/cgroup/user.slice/job/accelkit-pid-42"
    assert (chosen.cgroup_dir / "memory.max").read_text() == str(1024**3)
    assert "cgroup v2" in chosen.description
    for leftover in chosen.cgroup_dir.iterdir():  # a real cgroupfs has no files to delete
        leftover.unlink()
    chosen.remove()
    assert not chosen.cgroup_dir.exists()


@pytest.mark.parametrize(
    ("v2", "make_dir", "reason"),
    [(False, True, "no cgroup v2"), (True, False, "cannot create a cgroup")],
)
def test_memory_limit_falls_back_to_rlimit(tmp_path, v2, make_dir, reason):
    chosen = choose_memory_limit(
        512 * 1024**2, "w", root=_fake_root(tmp_path, v2=v2, make_dir=make_dir)
    )
    assert chosen.method is LimitMethod.RLIMIT
    assert reason in chosen.reason
    assert chosen.description == f"memory limit 512M through RLIMIT_AS ({chosen.reason})"
    chosen.remove()  # nothing to remove


def test_no_limit_means_no_method(tmp_path):
    chosen = choose_memory_limit(None, "w", root=tmp_path)
    assert chosen == MemoryLimit(LimitMethod.NONE)
    assert chosen.description == "no memory limit"


def test_memory_limit_without_write_access_falls_back(tmp_path, monkeypatch):
    root = _fake_root(tmp_path)
    real_write = type(root).write_text

    def refuse(self, *args, **kwargs):
        if self.name == "memory.max":
            raise PermissionError(13, "Permission denied")
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(type(root), "write_text", refuse)
    chosen = choose_memory_limit(1024, "w", root=root)
    assert chosen.method is LimitMethod.RLIMIT
    assert "not delegated" in chosen.reason
    assert not (root / "sys/fs/cgroup/user.slice/job/accelkit-w").exists()
    assert os.path.isdir(root / "sys/fs/cgroup/user.slice/job")


def test_an_empty_cpu_set_is_refused_before_anything_runs(config, monkeypatch):
    original = MockLifecycleHook.pre_create

    async def pre_create(self):
        base = await original(self)
        return WorkloadConfig(env_vars=base.env_vars, cpuset_cpus=())

    monkeypatch.setattr(MockLifecycleHook, "pre_create", pre_create)
    steps: list[str] = []

    async def main():
        async with Node.open(config) as host:
            with pytest.raises(WorkloadError, match="plugin 'cpu': cpuset_cpus is empty"):
                await run_workload(
                    host.bookkeeper,
                    AgentId("agent-1"),
                    {SlotName("cpu"): Decimal(1)},
                    ["true"],
                    checkpoint=steps.append,
                )
            return dict(host.agents[AgentId("agent-1")].contexts["cpu"].alloc_map.allocations)

    allocations = asyncio.run(main())
    assert "spawned" not in steps
    assert all(not amount for per_device in allocations.values() for amount in per_device.values())
    assert Ledger(config.resource.state_dir).read_all() == {}
