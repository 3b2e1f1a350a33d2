"""Which cores the cpu plugin finds, on fake cgroup/sysfs trees and on this machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from accelkit.cgroup import CgroupFormatError
from accelkit.errors import PluginLoadError, PluginUnavailable
from accelkit.testing.fakehost import FakeHost
from accelkit_cpu.topology import CPUTopology, model_names, numa_nodes

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Fake CPU @ 2.0GHz

processor\t: 1
model name\t: Fake CPU @ 2.0GHz
model name\t: second value ignored

processor\t: 2
this line has no separator

processor\t: x
model name\t: not a core number
"""


def never() -> list[int]:
    msg = "the affinity mask must not be consulted when a cpuset exists"
    raise AssertionError(msg)


def test_v1_cpuset(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    point = host.mount_v1("cpuset", "/sys/fs/cgroup/cpuset")
    host.member("3:cpuset:/job")
    host.write("sys/fs/cgroup/cpuset/job/cpuset.effective_cpus", "0-3,8\n")
    host.write("sys/fs/cgroup/cpuset/job/cpuset.cpus", "0-15\n")
    topology = CPUTopology.read(tmp_path, never)
    assert topology.cores == (0, 1, 2, 3, 8)
    assert topology.source == str(point / "job/cpuset.effective_cpus")


def test_v1_without_effective_file_uses_cpuset_cpus(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v1("cpuset", "/sys/fs/cgroup/cpuset")
    host.member("3:cpuset:/")
    host.write("sys/fs/cgroup/cpuset/cpuset.cpus", "2-3\n")
    assert CPUTopology.read(tmp_path, never).cores == (2, 3)


def test_v2_nested_cgroup_inherits_the_nearest_cpuset(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v2()
    host.member("0::/outer/inner/leaf")
    host.write("sys/fs/cgroup/cpuset.cpus.effective", "0-7\n")
    host.write("sys/fs/cgroup/outer/cpuset.cpus.effective", "4-5\n")
    host.write("sys/fs/cgroup/outer/inner/cpuset.cpus.effective", "\n")  # empty: inherited
    (tmp_path / "sys/fs/cgroup/outer/inner/leaf").mkdir()
    topology = CPUTopology.read(tmp_path, never)
    assert topology.cores == (4, 5)
    assert topology.source.endswith("outer/cpuset.cpus.effective")


def test_hybrid_host_uses_the_v1_cpuset(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v1("cpuset", "/sys/fs/cgroup/cpuset")
    host.mount_v2("/sys/fs/cgroup/unified")
    host.member("3:cpuset:/", "0::/")
    host.write("sys/fs/cgroup/cpuset/cpuset.effective_cpus", "1\n")
    host.write("sys/fs/cgroup/unified/cpuset.cpus.effective", "0-1\n")
    assert CPUTopology.read(tmp_path, never).cores == (1,)


@pytest.mark.parametrize(
    "setup",
    [
        "no-mountinfo",  # no cgroups mounted at all
        "no-membership",  # cgroups mounted, but /proc/self/cgroup missing
        "no-cpuset-files",  # the cgroup exists but has no cpuset file anywhere
    ],
)
def test_falls_back_to_the_affinity_mask(tmp_path: Path, setup: str) -> None:
    host = FakeHost(tmp_path)
    if setup != "no-mountinfo":
        host.mount_v2()
    if setup == "no-cpuset-files":
        host.member("0::/a")
        (tmp_path / "sys/fs/cgroup/a").mkdir(parents=True)
    topology = CPUTopology.read(tmp_path, lambda: {3, 1})
    assert topology.cores == (1, 3)
    assert topology.source == "sched_getaffinity"


def test_an_empty_affinity_mask_makes_the_plugin_unavailable(tmp_path: Path) -> None:
    with pytest.raises(PluginUnavailable, match="no usable CPU core"):
        CPUTopology.read(tmp_path, set)


def test_garbage_cpuset_is_a_clear_error(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v2()
    host.member("0::/")
    host.write("sys/fs/cgroup/cpuset.cpus.effective", "0-3,banana\n")
    with pytest.raises(PluginLoadError, match=r"cpuset.cpus.effective: malformed CPU list"):
        CPUTopology.read(tmp_path, never)


def test_garbage_proc_cgroup_is_a_clear_error(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v2()
    host.write("proc/self/cgroup", "\x00\x01 not a cgroup file\n")
    with pytest.raises(CgroupFormatError, match=r"proc/self/cgroup, line 1"):
        CPUTopology.read(tmp_path, never)


def test_garbage_mountinfo_is_a_clear_error(tmp_path: Path) -> None:
    FakeHost(tmp_path).write("proc/self/mountinfo", "what is this\n")
    with pytest.raises(CgroupFormatError, match=r"mountinfo, line 1: not a mountinfo line"):
        CPUTopology.read(tmp_path, never)


def test_numa_nodes_from_sysfs(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.write("sys/devices/system/node/node0/cpulist", "0-1,4\n")
    host.write("sys/devices/system/node/node1/cpulist", "2-3\n")
    host.write("sys/devices/system/node/node2/cpulist", "\n")  # memory-only node
    (tmp_path / "sys/devices/system/node/node3").mkdir()  # no cpulist file
    host.write("sys/devices/system/node/possible", "0-3\n")
    host.write("sys/devices/system/node/nodeX/cpulist", "9\n")
    assert numa_nodes(tmp_path) == {0: 0, 1: 0, 4: 0, 2: 1, 3: 1}


def test_no_numa_directory_means_unknown_nodes(tmp_path: Path) -> None:
    assert numa_nodes(tmp_path) == {}


def test_garbage_numa_cpulist_is_a_clear_error(tmp_path: Path) -> None:
    FakeHost(tmp_path).write("sys/devices/system/node/node0/cpulist", "zero\n")
    with pytest.raises(PluginLoadError, match=r"node0/cpulist: malformed CPU list 'zero'"):
        numa_nodes(tmp_path)


def test_model_names_from_cpuinfo(tmp_path: Path) -> None:
    FakeHost(tmp_path).write("proc/cpuinfo", CPUINFO)
    assert model_names(tmp_path) == {0: "Fake CPU @ 2.0GHz", 1: "Fake CPU @ 2.0GHz"}
    assert model_names(tmp_path / "nowhere") == {}


def test_this_machine_agrees_with_sched_getaffinity() -> None:
    topology = CPUTopology.read()
    assert topology.cores == tuple(sorted(os.sched_getaffinity(0)))
    assert set(topology.numa_node) >= set(topology.cores) or not topology.numa_node
    assert all(topology.model_name.get(core) for core in topology.cores)
