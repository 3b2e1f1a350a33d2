"""The usable memory: RAM capped by cgroup limits, on fake trees and this machine."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from accelkit.cgroup import CgroupFormatError
from accelkit.errors import PluginUnavailable
from accelkit.testing.fakehost import FakeHost
from accelkit_mem.limits import UsableMemory

GiB = 2**30
RAM = 16 * GiB


def ram() -> int:
    return RAM


def v1_host(tmp_path: Path, path: str = "/job") -> FakeHost:
    host = FakeHost(tmp_path)
    host.mount_v1("memory", "/sys/fs/cgroup/memory")
    host.member(f"4:memory:{path}")
    return host


def v2_host(tmp_path: Path, path: str = "/job") -> FakeHost:
    host = FakeHost(tmp_path)
    host.mount_v2()
    host.member(f"0::{path}")
    return host


def test_v1_limit_below_ram(tmp_path: Path) -> None:
    host = v1_host(tmp_path)
    source = host.write("sys/fs/cgroup/memory/job/memory.limit_in_bytes", f"{4 * GiB}\n")
    usable = UsableMemory.read(tmp_path, ram)
    assert (usable.size, usable.ram, usable.source) == (4 * GiB, RAM, str(source))
    assert usable.cgroup is not None
    assert usable.cgroup.path == source.parent


def test_v1_unlimited_is_ignored(tmp_path: Path) -> None:
    host = v1_host(tmp_path)
    host.write("sys/fs/cgroup/memory/job/memory.limit_in_bytes", "9223372036854771712\n")
    usable = UsableMemory.read(tmp_path, ram)
    assert (usable.size, usable.source, usable.cgroup) == (RAM, "ram", None)


def test_v2_max_is_ignored(tmp_path: Path) -> None:
    host = v2_host(tmp_path)
    host.write("sys/fs/cgroup/job/memory.max", "max\n")
    assert UsableMemory.read(tmp_path, ram).size == RAM


def test_v2_nested_limit_comes_from_the_lowest_ancestor(tmp_path: Path) -> None:
    host = v2_host(tmp_path, "/outer/middle/job")
    host.write("sys/fs/cgroup/outer/memory.max", f"{8 * GiB}\n")
    source = host.write("sys/fs/cgroup/outer/middle/memory.max", f"{2 * GiB}\n")
    host.write("sys/fs/cgroup/outer/middle/job/memory.max", "max\n")
    usable = UsableMemory.read(tmp_path, ram)
    assert (usable.size, usable.source) == (2 * GiB, str(source))


def test_a_limit_above_ram_leaves_ram(tmp_path: Path) -> None:
    host = v2_host(tmp_path)
    host.write("sys/fs/cgroup/job/memory.max", f"{64 * GiB}\n")
    assert UsableMemory.read(tmp_path, ram).source == "ram"


@pytest.mark.parametrize("setup", ["no-mountinfo", "no-membership", "no-limit-file"])
def test_without_a_readable_limit_ram_is_usable(tmp_path: Path, setup: str) -> None:
    if setup == "no-membership":
        FakeHost(tmp_path).mount_v2()
    elif setup == "no-limit-file":
        v1_host(tmp_path)
    assert UsableMemory.read(tmp_path, ram).size == RAM


def test_garbage_limit_is_a_clear_error(tmp_path: Path) -> None:
    host = v1_host(tmp_path)
    host.write("sys/fs/cgroup/memory/job/memory.limit_in_bytes", "plenty\n")
    with pytest.raises(CgroupFormatError, match=r"memory.limit_in_bytes: expected a number"):
        UsableMemory.read(tmp_path, ram)


def test_garbage_proc_cgroup_is_a_clear_error(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v2()
    host.write("proc/self/cgroup", "???\n")
    with pytest.raises(CgroupFormatError, match=r"proc/self/cgroup, line 1"):
        UsableMemory.read(tmp_path, ram)


def test_a_zero_limit_makes_the_plugin_unavailable(tmp_path: Path) -> None:
    host = v2_host(tmp_path)
    host.write("sys/fs/cgroup/job/memory.max", "0\n")
    with pytest.raises(PluginUnavailable, match=r"memory.max limits this process to 0 bytes"):
        UsableMemory.read(tmp_path, ram)


def test_no_ram_makes_the_plugin_unavailable(tmp_path: Path) -> None:
    with pytest.raises(PluginUnavailable, match="the node reports 0 bytes of RAM"):
        UsableMemory.read(tmp_path, lambda: 0)


def test_this_machine() -> None:
    usable = UsableMemory.read()
    assert usable.ram == psutil.virtual_memory().total
    assert 0 < usable.size <= usable.ram
