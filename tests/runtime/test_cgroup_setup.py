"""Making a workload's cgroups, against fake cgroup trees in ``tmp_path`` (v2, v1, none).

This machine's cgroup v2 hierarchy has no controllers, so the v2 code is checked against a
directory with the control files; a test against a real delegated v2 tree skips where there is
none. The real v1 files are exercised by ``test_process_runtime.py``.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.cgroup import CgroupFS
from accelkit.errors import WorkloadError
from accelkit.runtime import cgroup_setup
from accelkit.runtime.cgroup_limits import CgroupLimits, cpu_list, deny_rules
from accelkit.runtime.cgroup_setup import make_cgroups, sweep_stale
from accelkit.runtime.cgroups import (
    SUPERVISOR_LEAF,
    V2_DEVICES_NOTE,
    CgroupSetupError,
    WorkloadCgroups,
    workload_cgroup_path,
)

RELATIVE = "accelkit/agent-1/pid-42"


def fake_v2(tmp_path: Path, *, controllers: str = "cpuset cpu io memory pids") -> Path:
    root = tmp_path / "root"
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/mountinfo").write_text(
        "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
    )
    (root / "proc/self/cgroup").write_text("0::/user.slice/job\n")
    base = root / "sys/fs/cgroup/user.slice/job"
    base.mkdir(parents=True)
    (base / "cgroup.controllers").write_text(controllers + "\n")
    (base / "cgroup.subtree_control").write_text("")
    (base / "cgroup.procs").write_text(f"{os.getpid()}\n")
    return root


def test_v2_moves_accelkit_into_a_leaf_enables_controllers_and_limits_the_leaf(tmp_path):
    root = fake_v2(tmp_path)
    base = root / "sys/fs/cgroup/user.slice/job"
    leaf = base / RELATIVE
    leaf.mkdir(parents=True)  # as the kernel would: with its control files
    (leaf / "memory.swap.max").write_text("max")
    limits = CgroupLimits(memory=2**30, cpus=(0, 1, 3), mems=(0,), pids_max=64)
    made = make_cgroups(CgroupFS.read(root), RELATIVE, limits)
    assert made.version == 2
    assert made.dirs == {"unified": leaf, "memory": leaf, "cpuset": leaf, "pids": leaf}
    assert (base / SUPERVISOR_LEAF / "cgroup.procs").read_text() == str(os.getpid())
    assert (base / "cgroup.subtree_control").read_text() == "+memory +cpuset +pids"
    for level in (base / "accelkit", base / "accelkit/agent-1"):
        assert (level / "cgroup.subtree_control").read_text() == "+memory +cpuset +pids"
    assert (leaf / "memory.max").read_text() == str(2**30)
    assert (leaf / "memory.swap.max").read_text() == "0"
    assert (leaf / "cpuset.cpus").read_text() == "0-1,3"
    assert (leaf / "cpuset.mems").read_text() == "0"
    assert (leaf / "pids.max").read_text() == "64"
    assert made.missing == {"devices": V2_DEVICES_NOTE}
    assert made.procs_files() == (str(leaf / "cgroup.procs"),)


def test_v2_from_the_supervisor_leaf_uses_its_parent(tmp_path):
    root = fake_v2(tmp_path)
    (root / "proc/self/cgroup").write_text(f"0::/user.slice/job/{SUPERVISOR_LEAF}\n")
    (root / "sys/fs/cgroup/user.slice/job/cgroup.subtree_control").write_text("memory cpuset pids")
    made = make_cgroups(CgroupFS.read(root), RELATIVE, CgroupLimits())
    assert made.dirs["unified"] == root / "sys/fs/cgroup/user.slice/job" / RELATIVE
    assert not (root / "sys/fs/cgroup/user.slice/job" / SUPERVISOR_LEAF / SUPERVISOR_LEAF).exists()


def test_v2_without_delegated_controllers_lists_them_missing(tmp_path):
    root = fake_v2(tmp_path, controllers="cpu io")
    made = make_cgroups(CgroupFS.read(root), RELATIVE, CgroupLimits(memory=2**30))
    assert set(made.dirs) == {"unified"}
    assert "not delegated" in made.missing["memory"]
    assert not (made.dirs["unified"] / "memory.max").exists()


def busy_when_enabled_in(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Enabling controllers in ``directory`` fails as the kernel's does for a group with
    processes (cgroup v2's no-internal-process rule)."""
    real = cgroup_setup.write_control

    def busy(path: Path, value: str) -> None:
        if path == directory / "cgroup.subtree_control":
            raise OSError(errno.EBUSY, "Device or resource busy")
        real(path, value)

    monkeypatch.setattr(cgroup_setup, "write_control", busy)


def test_v2_with_other_processes_in_the_base_makes_the_groups_beside_it(tmp_path, monkeypatch):
    root = fake_v2(tmp_path)
    slice_, base = root / "sys/fs/cgroup/user.slice", root / "sys/fs/cgroup/user.slice/job"
    (base / "cgroup.procs").write_text(f"1\n{os.getpid()}\n")  # a shell's, and this one
    busy_when_enabled_in(base, monkeypatch)
    made = make_cgroups(CgroupFS.read(root), RELATIVE, CgroupLimits(memory=2**30))
    leaf = slice_ / RELATIVE
    assert made.dirs == {"unified": leaf, "memory": leaf, "cpuset": leaf, "pids": leaf}
    for level in (slice_ / "accelkit", slice_ / "accelkit/agent-1"):
        assert (level / "cgroup.subtree_control").read_text() == "+memory +cpuset +pids"
    assert (leaf / "memory.max").read_text() == str(2**30)
    assert not (base / SUPERVISOR_LEAF).exists(), "this process stays where it was"
    assert not (base / "accelkit").exists()


def test_v2_a_delegated_scope_of_this_process_and_its_launcher_keeps_the_groups(
    tmp_path, monkeypatch
):
    """``systemd-run --scope -p Delegate=yes accelkit run``: the scope holds accelkit and the
    launcher it started for the workload, and nothing else. Both move to the supervisor leaf,
    and the workload's groups stay inside the scope."""
    root = fake_v2(tmp_path)
    base = root / "sys/fs/cgroup/user.slice/job"
    launcher = subprocess.Popen(["sleep", "60"])
    moved: list[str] = []
    real = cgroup_setup.write_control

    def record(path: Path, value: str) -> None:
        if path == base / SUPERVISOR_LEAF / "cgroup.procs":
            moved.append(value)
        real(path, value)

    monkeypatch.setattr(cgroup_setup, "write_control", record)
    try:
        (base / "cgroup.procs").write_text(f"{os.getpid()}\n{launcher.pid}\n")
        made = make_cgroups(CgroupFS.read(root), RELATIVE, CgroupLimits(memory=2**30))
    finally:
        launcher.kill()
        launcher.wait()
    assert sorted(moved) == sorted([str(os.getpid()), str(launcher.pid)])
    assert made.dirs["memory"] == base / RELATIVE  # inside the scope, not beside it
    assert (base / "cgroup.subtree_control").read_text() == "+memory +cpuset +pids"


def test_v2_busy_at_the_top_of_the_hierarchy_is_no_group_and_says_how_to_delegate(
    tmp_path, monkeypatch
):
    root = fake_v2(tmp_path)
    top = root / "sys/fs/cgroup"
    (root / "proc/self/cgroup").write_text("0::/\n")  # a cgroup namespace's root
    (top / "cgroup.controllers").write_text("memory pids\n")
    (top / "cgroup.subtree_control").write_text("")
    (top / "cgroup.procs").write_text(f"1\n{os.getpid()}\n")
    busy_when_enabled_in(top, monkeypatch)
    made = make_cgroups(CgroupFS.read(root), RELATIVE, CgroupLimits(memory=2**30))
    assert made.dirs == {}  # as without cgroups: the leader's process group, memory missing
    assert "no-internal-process rule" in made.missing["memory"]
    assert "top of the hierarchy" in made.missing["memory"]
    assert "Delegate=yes" in made.missing["memory"]
    assert not (top / "accelkit").exists()


def test_v2_a_group_this_user_may_not_change_is_no_group_and_says_why(tmp_path, monkeypatch):
    """A login session's scope belongs to root: another user's run makes no group there."""
    root = fake_v2(tmp_path)
    base = root / "sys/fs/cgroup/user.slice/job"
    (base / "cgroup.procs").write_text(f"{os.getpid()}\n")
    real = cgroup_setup.write_control

    def refuse(path: Path, value: str) -> None:
        if path.name in ("cgroup.subtree_control", "cgroup.procs"):
            raise PermissionError(errno.EACCES, "Permission denied")
        real(path, value)

    monkeypatch.setattr(cgroup_setup, "write_control", refuse)
    made = make_cgroups(CgroupFS.read(root), RELATIVE, CgroupLimits(memory=2**30))
    assert made.dirs == {}
    for controller in ("memory", "cpuset", "pids"):
        assert made.missing[controller] == (
            f"cannot create a cgroup v2 group under {base}: Permission denied (run accelkit "
            "as root, or in a cgroup delegated to its user)"
        )
    assert made.missing["devices"] == V2_DEVICES_NOTE


def test_v2_unwritable_limits_are_a_setup_error_and_leave_no_group(tmp_path, monkeypatch):
    root = fake_v2(tmp_path)
    real = cgroup_setup.write_control

    def refuse(path: Path, value: str) -> None:
        if path.name == "memory.max":
            raise PermissionError(errno.EACCES, "Permission denied")
        real(path, value)

    monkeypatch.setattr(cgroup_setup, "write_control", refuse)
    with pytest.raises(CgroupSetupError, match=r"cannot set limits .*Permission denied"):
        make_cgroups(CgroupFS.read(root), RELATIVE, CgroupLimits(memory=2**30))


def test_v2_kill_uses_cgroup_kill(tmp_path):
    leaf = tmp_path / "leaf"
    leaf.mkdir()
    (leaf / "cgroup.kill").write_text("0")
    WorkloadCgroups(2, RELATIVE, {"unified": leaf}).kill()
    assert (leaf / "cgroup.kill").read_text() == "1"


def test_v2_without_cgroup_kill_freezes_and_kills_every_process(tmp_path):
    leaf = tmp_path / "leaf"
    leaf.mkdir()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (leaf / "cgroup.procs").write_text(f"{sleeper.pid}\n")
        (leaf / "cgroup.freeze").write_text("0")
        (leaf / "cgroup.events").write_text("populated 1\nfrozen 1\n")
        WorkloadCgroups(2, RELATIVE, {"unified": leaf}).kill()
        assert sleeper.wait(10) == -signal.SIGKILL
        assert (leaf / "cgroup.freeze").read_text() == "0"  # thawed again
    finally:
        sleeper.kill()
        sleeper.wait()


def test_v2_a_group_with_exiting_processes_is_populated_though_it_lists_none(tmp_path):
    leaf = tmp_path / "leaf"
    leaf.mkdir()
    (leaf / "cgroup.procs").write_text("")  # v2 hides a process once it starts to exit
    (leaf / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    cgroups = WorkloadCgroups(2, RELATIVE, {"unified": leaf, "memory": leaf})
    assert cgroups.pids() == set()
    assert cgroups.populated()
    (leaf / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    assert not cgroups.populated()


@pytest.mark.parametrize("events", [None, "populated one\n"])
def test_without_a_readable_events_file_populated_is_whether_processes_are_listed(tmp_path, events):
    leaf = tmp_path / "leaf"
    leaf.mkdir()
    if events is not None:
        (leaf / "cgroup.events").write_text(events)
    cgroups = WorkloadCgroups(2, RELATIVE, {"unified": leaf})
    (leaf / "cgroup.procs").write_text("")
    assert not cgroups.populated()
    (leaf / "cgroup.procs").write_text(f"{os.getpid()}\n")
    assert cgroups.populated()


def test_no_cgroup_hierarchy_at_all_lists_every_controller_missing(tmp_path):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text("")
    made = make_cgroups(CgroupFS.read(tmp_path), RELATIVE, CgroupLimits())
    assert made.dirs == {}
    assert set(made.missing) == {"memory", "cpuset", "pids", "freezer", "devices"}


def test_an_existing_group_with_processes_is_refused(tmp_path):
    root = fake_v2(tmp_path)
    leaf = root / "sys/fs/cgroup/user.slice/job" / RELATIVE
    leaf.mkdir(parents=True)
    (leaf / "cgroup.procs").write_text("12345\n")
    with pytest.raises(CgroupSetupError, match="already exists and has processes"):
        make_cgroups(CgroupFS.read(root), RELATIVE, CgroupLimits())


def test_handle_details_round_trip(tmp_path):
    made = WorkloadCgroups(
        1, RELATIVE, {"memory": tmp_path / "m", "pids": tmp_path / "p"}, {"devices": "why"}
    )
    back = WorkloadCgroups.from_details(RELATIVE, made.to_details())
    assert back.dirs == made.dirs
    assert back.version == 1
    assert made.to_details()["missing"] == "devices: why"


def test_names_are_sanitised():
    assert workload_cgroup_path("agent one/..", "pid:42") == "accelkit/agent-one-/pid-42"
    assert workload_cgroup_path("..", "..") == "accelkit/-/-"


def _parse(text: str) -> set[int]:
    found: set[int] = set()
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


@given(st.sets(st.integers(min_value=0, max_value=512), max_size=64))
def test_cpu_list_names_exactly_the_given_ids(ids):
    text = cpu_list(ids)
    assert _parse(text) == ids
    assert len(text.split(",")) <= len(ids) or not ids  # ranges never add entries


def test_deny_rules_keep_the_granted_nodes_by_device_number(tmp_path):
    full = tmp_path / "full"
    zero = tmp_path / "zero"
    os.mknod(full, 0o600 | 0o020000, os.stat("/dev/full").st_rdev)
    os.mknod(zero, 0o600 | 0o020000, os.stat("/dev/zero").st_rdev)
    rules = deny_rules([str(full), str(zero), str(tmp_path / "gone")], ["/dev/zero"])
    assert [r.deny_line() for r in rules] == ["c 1:7 rwm"]
    (tmp_path / "plain").write_text("")
    with pytest.raises(WorkloadError, match="is not a device node"):
        deny_rules([str(tmp_path / "plain")], [])


def _real_v2_problem() -> str | None:
    fs = CgroupFS.read()
    own = fs.process_directory("memory")
    if own is None or own.version != 2:
        return "no cgroup v2 memory controller here (cgroup v1 or hybrid)"
    if "memory" not in (own.read("cgroup.controllers") or "").split():
        return f"the memory controller is not delegated to {own.path}"
    return None


@pytest.mark.skipif(_real_v2_problem() is not None, reason=str(_real_v2_problem()))
def test_a_real_v2_tree_gets_the_memory_limit(tmp_path):
    made = make_cgroups(CgroupFS.read(), RELATIVE + "-real", CgroupLimits(memory=2**30))
    try:
        assert (made.dirs["memory"] / "memory.max").read_text().strip() == str(2**30)
    finally:
        made.remove()


def test_stale_empty_groups_of_gone_leaders_are_swept(tmp_path):
    agent = tmp_path / "accelkit/agent-1"
    mine = agent / "pid-42"
    for name in ("pid-42", "pid-1", "other", "pid-999999998"):
        (agent / name).mkdir(parents=True)
        (agent / name / "cgroup.procs").write_text("")
    (agent / "pid-999999998/cgroup.procs").write_text("777\n")  # a live child: kept
    (agent / "pid-999999999").mkdir()  # stale: its leader is gone and it is empty
    assert sweep_stale(WorkloadCgroups(1, RELATIVE, {"memory": mine})) == 1
    assert sorted(p.name for p in agent.iterdir()) == [
        "other",
        "pid-1",  # its leader (pid 1) runs
        "pid-42",
        "pid-999999998",
    ]
