"""The cgroup and process-tree readers in accelkit.cgroup, on fake and real trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from accelkit.cgroup import (
    CgroupDir,
    CgroupFormatError,
    CgroupFS,
    CgroupMount,
    WorkloadLocation,
    parse_mountinfo,
    parse_proc_cgroup,
    process_tree,
)
from accelkit.testing.fakehost import FakeHost, finish, spawn_python

HYBRID_MOUNTINFO = r"""25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime shared:9 master:2 - cgroup cgroup rw,cpuset
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
42 31 0:39 /docker/abc /mnt/my\040cgroups rw - cgroup cgroup rw,memory
"""


def test_mountinfo_lists_cgroup_mounts_only() -> None:
    mounts = parse_mountinfo(HYBRID_MOUNTINFO)
    assert [m.mount_point for m in mounts] == [
        "/sys/fs/cgroup/cpu,cpuacct",
        "/sys/fs/cgroup/cpuset",
        "/sys/fs/cgroup/systemd",
        "/sys/fs/cgroup/unified",
        "/mnt/my cgroups",
    ]
    assert mounts[0] == CgroupMount(
        "/sys/fs/cgroup/cpu,cpuacct", "/", 1, frozenset({"rw", "cpu", "cpuacct"})
    )
    assert mounts[3].version == 2
    assert mounts[3].options == frozenset()
    assert "name=systemd" in mounts[2].options
    assert mounts[4].mount_root == "/docker/abc"


@pytest.mark.parametrize(
    "line",
    [
        "garbage",
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime cgroup cgroup rw,cpu",  # no separator
        "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup",  # no super options
        "32 31 - cgroup cgroup rw",  # too few fields before the separator
    ],
)
def test_mountinfo_garbage_is_a_clear_error(line: str) -> None:
    with pytest.raises(CgroupFormatError, match=r"mountinfo, line 2: not a mountinfo line"):
        parse_mountinfo("25 1 8:1 / / rw - ext4 /dev/sda1 rw\n" + line + "\n")


def test_proc_cgroup_lists_memberships() -> None:
    memberships = parse_proc_cgroup("4:memory:/a/b\n3:cpu,cpuacct:/\n\n0::/user.slice/x:y\n")
    assert [(m.hierarchy_id, m.controllers, m.path) for m in memberships] == [
        (4, frozenset({"memory"}), "/a/b"),
        (3, frozenset({"cpu", "cpuacct"}), "/"),
        (0, frozenset(), "/user.slice/x:y"),
    ]


@pytest.mark.parametrize("line", ["nonsense", "x:memory:/a", "4:memory:relative", "4:memory"])
def test_proc_cgroup_garbage_is_a_clear_error(line: str) -> None:
    with pytest.raises(
        CgroupFormatError, match=r"my-file, line 1: expected 'id:controllers:/path'"
    ):
        parse_proc_cgroup(line, source="my-file")


def test_no_mountinfo_means_no_cgroups(tmp_path: Path) -> None:
    cgroups = CgroupFS.read(tmp_path)
    assert cgroups.mounts == ()
    assert cgroups.process_directory("memory") is None
    assert cgroups.directory("memory", "/a") is None


def test_v1_controller_resolves_in_its_own_hierarchy(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    point = host.mount_v1("memory", "/sys/fs/cgroup/memory")
    host.mount_v2("/sys/fs/cgroup/unified")
    host.member("4:memory:/jobs/one", "0::/init.scope")
    cgroups = CgroupFS.read(tmp_path)
    assert cgroups.process_directory("memory") == CgroupDir(point / "jobs/one", 1, point)
    # cpuacct is on no v1 hierarchy, so it is looked up in the unified (v2) one
    unified = tmp_path / "sys/fs/cgroup/unified"
    assert cgroups.process_directory("cpuacct") == CgroupDir(unified / "init.scope", 2, unified)


def test_v2_only_host(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    point = host.mount_v2()
    host.member("0::/system.slice/job.service", pid="42")
    cgroups = CgroupFS.read(tmp_path)
    found = cgroups.process_directory("memory", 42)
    assert found == CgroupDir(point / "system.slice/job.service", 2, point)
    assert cgroups.process_directory("memory", 43) is None  # no such process
    assert cgroups.directory("cpuacct", "/") == CgroupDir(point, 2, point)


def test_process_without_a_membership_in_the_hierarchy(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v1("memory", "/sys/fs/cgroup/memory")
    host.member("3:cpu:/")
    assert CgroupFS.read(tmp_path).process_directory("memory") is None


def test_container_mount_root_is_stripped(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    point = host.mount_v1("memory", "/sys/fs/cgroup/memory", mount_root="/docker/abc")
    cgroups = CgroupFS.read(tmp_path)
    assert cgroups.directory("memory", "/docker/abc") == CgroupDir(point, 1, point)
    assert cgroups.directory("memory", "/docker/abc/child").path == point / "child"  # type: ignore[union-attr]
    assert cgroups.directory("memory", "/docker/other") is None  # not visible from here
    assert cgroups.directory("memory", "/docker/abcdef") is None


def test_cgroup_paths_may_not_escape(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.mount_v2()
    with pytest.raises(ValueError, match=r"without '\.\.'"):
        CgroupFS.read(tmp_path).directory("memory", "/a/../../etc")
    with pytest.raises(ValueError, match="absolute"):
        CgroupFS.read(tmp_path).directory("memory", "a")


def test_cgroup_dir_reads_numbers_and_keyed_files(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.write("cg/memory.max", "max\n")
    host.write("cg/memory.current", "4096\n")
    host.write("cg/memory.stat", "anon 10\ninactive_file 20\n\n")
    host.write("cg/bad", "lots\n")
    host.write("cg/bad.stat", "anon ten\n")
    cgroup = CgroupDir(tmp_path / "cg", 2, tmp_path / "cg")
    assert cgroup.read_int("memory.max") is None
    assert cgroup.read_int("memory.current") == 4096
    assert cgroup.read_int("missing") is None
    assert cgroup.read_keyed("memory.stat") == {"anon": 10, "inactive_file": 20}
    assert cgroup.read_keyed("missing") is None
    with pytest.raises(CgroupFormatError, match=r"cg/bad: expected a number or 'max', got 'lots'"):
        cgroup.read_int("bad")
    with pytest.raises(CgroupFormatError, match=r"bad.stat: expected 'key number' lines"):
        cgroup.read_keyed("bad.stat")


def test_ancestors_stop_at_the_mount_point(tmp_path: Path) -> None:
    top = tmp_path / "sys/fs/cgroup"
    chain = [d.path for d in CgroupDir(top / "a/b", 2, top).ancestors()]
    assert chain == [top / "a/b", top / "a", top]


@pytest.mark.parametrize(
    ("workload_id", "expected"),
    [
        ("pid:12", WorkloadLocation(pid=12)),
        ("12", WorkloadLocation(pid=12)),
        (
            "cgroup:/system.slice/job.service",
            WorkloadLocation(cgroup_path="/system.slice/job.service"),
        ),
        ("cgroup:/a//b/", WorkloadLocation(cgroup_path="/a/b")),
    ],
)
def test_workload_location_forms(workload_id: str, expected: WorkloadLocation) -> None:
    assert WorkloadLocation.parse(workload_id) == expected


@pytest.mark.parametrize("workload_id", ["pid:x", "pid:0", "pid:-3", "job-7", "0", "docker:abc"])
def test_workload_location_refuses_unknown_ids(workload_id: str) -> None:
    with pytest.raises(ValueError, match=r"cannot locate workload .*expected 'cgroup:/<path>'"):
        WorkloadLocation.parse(workload_id)


@pytest.mark.parametrize("workload_id", ["cgroup:relative", "cgroup:/a/../b"])
def test_workload_location_refuses_unsafe_cgroup_paths(workload_id: str) -> None:
    with pytest.raises(ValueError, match="a cgroup path must be absolute"):
        WorkloadLocation.parse(workload_id)


def test_process_tree_follows_children_files(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.process(10, 1, children=[11, 12])
    host.process(11, 10, children=[13])
    host.process(12, 10)
    host.process(13, 11, children=[10])  # a bogus loop must not hang the walk
    host.process(20, 1)  # not in the tree
    assert process_tree(10, root=tmp_path) == (10, 11, 12, 13)
    assert process_tree(11, root=tmp_path) == (11, 13, 10, 12)
    assert process_tree(99, root=tmp_path) == ()


def test_process_tree_scans_parents_without_children_files(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.process(10, 1, comm="sh (x) y")
    host.process(11, 10)
    host.process(12, 11)
    host.process(20, 1)
    for pid in (10, 11, 12, 20):
        (tmp_path / f"proc/{pid}/task/{pid}/children").unlink()
    host.write("proc/self/mountinfo", "")  # a non-pid entry the scan must skip
    assert process_tree(10, root=tmp_path) == (10, 11, 12)


def test_process_tree_of_a_real_child_and_grandchild() -> None:
    code = (
        "import subprocess, sys\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'],"
        " stdin=subprocess.PIPE)\n"
        "print(g.pid, flush=True)\n"
        "sys.stdin.read()\n"
        "g.stdin.close(); g.wait()\n"
    )
    child = spawn_python(code)
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        assert process_tree(child.pid) == (child.pid, grandchild)
        assert child.pid in process_tree(os.getpid())
    finally:
        finish(child)
    assert process_tree(child.pid) == ()


def test_real_process_cgroups_are_found() -> None:
    cgroups = CgroupFS.read()
    if not cgroups.mounts:
        pytest.skip("no cgroup hierarchy is mounted here")
    memory = cgroups.process_directory("memory")
    assert memory is not None
    assert memory.path.is_dir()
    assert memory.read_int("memory.limit_in_bytes" if memory.version == 1 else "memory.current")


def test_location_of_an_unlocatable_workload_is_none() -> None:
    assert WorkloadLocation.of("container-7f3a") is None
    assert WorkloadLocation.of("pid:0") is None
    assert WorkloadLocation.of("pid:42") == WorkloadLocation(pid=42)
    assert WorkloadLocation.of("cgroup:/a/b") == WorkloadLocation(cgroup_path="/a/b")
