"""A root workload cannot leave its cgroups, and ``pids.max`` bounds its processes.

Real cgroups, real processes, as root: the workload tries what a root process would to walk out
(write its pid into a ``cgroup.procs`` file outside its group, on every cgroup file system it
sees, v1 and v2; remount one read-write; mount a fresh one) and reports what the kernel said.
Where this process cannot make cgroups or lacks ``CAP_SYS_ADMIN`` the tests skip with the reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelkit.cgroup import CgroupFS
from accelkit.runtime import LaunchSpec, WorkloadHandle
from accelkit.runtime.cgroups import WorkloadCgroups
from accelkit.runtime.launcher import DROPPED_CAPABILITIES
from accelkit.runtime.process import ProcessRuntime
from accelkit.types import AgentId

from .unified_cgroup import drain_and_remove, fake_root

pytestmark = pytest.mark.slow  # real processes, real cgroups

AGENT = AgentId("agent-1")


def _capabilities() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def _problem() -> str | None:
    if os.geteuid() != 0:
        return "containment against a root workload is tested as root"
    if not _capabilities() >> 21 & 1:
        return "this process lacks CAP_SYS_ADMIN: it cannot make a mount namespace"
    own = CgroupFS.read().process_directory("pids")
    if own is None or not os.access(own.path, os.W_OK):
        return "no writable cgroup hierarchy with the pids controller here"
    if own.version == 2 and "pids" not in _controllers(own.path):
        return f"the pids controller is not delegated to {own.path} (cgroup v2)"
    return None


def _controllers(path: Path) -> list[str]:
    try:
        return (path / "cgroup.controllers").read_text().split()
    except OSError:
        return []


_PROBLEM = _problem()
#: set by CI as root: what would skip here fails instead
REQUIRED = os.environ.get("ACCELKIT_REQUIRE_CONTAINMENT") == "1"
root_only = pytest.mark.skipif(_PROBLEM is not None and not REQUIRED, reason=_PROBLEM or "")


@pytest.fixture(autouse=True)
def _required() -> None:
    if _PROBLEM is not None and REQUIRED:
        pytest.fail(f"ACCELKIT_REQUIRE_CONTAINMENT=1 but {_PROBLEM}")


#: what a root workload tries in order to leave its cgroups; prints what the kernel said
ESCAPE = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
def code(call):
    try:
        call()
        return "ok"
    except OSError as exc:
        return errno.errorcode[exc.errno]
def remount(point):
    if libc.mount(None, point.encode(), None, 32 | 4096, None) != 0:  # MS_REMOUNT|MS_BIND, rw
        raise OSError(ctypes.get_errno(), "mount")
def fresh(point):
    if libc.mount(b"none", point.encode(), b"tmpfs", 0, None) != 0:
        raise OSError(ctypes.get_errno(), "mount")
def write(path):
    with open(path, "w") as file:
        file.write(str(os.getpid()))
found = {}
for line in open("/proc/self/mountinfo"):
    before, _, after = line.partition(" - ")
    if after.split()[0] in ("cgroup", "cgroup2"):
        point = before.split()[4]
        found[point] = {
            "top": code(lambda: write(point + "/cgroup.procs")),
            "remount": code(lambda: remount(point)),
        }
status = dict(line.split(":\t", 1) for line in open("/proc/self/status") if ":\t" in line)
print(json.dumps({
    "mounts": found,
    "fresh": code(lambda: fresh("/tmp")),
    "bounding": int(status["CapBnd"], 16),
    "effective": int(status["CapEff"], 16),
    "cgroup": open("/proc/self/cgroup").read(),
}))
"""


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def _run_to_end(
    runtime: ProcessRuntime, argv: list[str], pids: int | None = None
) -> tuple[WorkloadHandle, int]:
    workload = await runtime.new_workload(AGENT)
    spec = LaunchSpec(
        AGENT, workload, argv, base_env=os.environ, memory_limit_required=False, pids_max=pids
    )
    try:
        handle = await runtime.create(spec)
    except BaseException:
        await runtime.discard(workload, None)
        raise
    try:
        await runtime.start(handle)
        status = await runtime.wait(handle)
    finally:
        await runtime.stop(handle, 0)
        await runtime.close()
    return handle, status


def _escape(runtime: ProcessRuntime, capfd: pytest.CaptureFixture[str]) -> tuple[dict, str]:
    capfd.readouterr()
    handle, status = run(_run_to_end(runtime, [sys.executable, "-c", ESCAPE]))
    out = capfd.readouterr().out
    assert status == 0, out
    return json.loads(out.strip().splitlines()[-1]), handle.ident


def _assert_contained(seen: dict) -> None:
    assert seen["mounts"], "the workload sees no cgroup file system"
    for point, tried in seen["mounts"].items():
        assert tried == {"top": "EROFS", "remount": "EPERM"}, point
    assert seen["fresh"] == "EPERM"
    for cap in DROPPED_CAPABILITIES:
        assert not seen["bounding"] >> cap & 1
        assert not seen["effective"] >> cap & 1


@root_only
def test_a_root_workload_cannot_write_its_pid_outside_its_cgroups(capfd):
    seen, ident = _escape(ProcessRuntime(), capfd)
    _assert_contained(seen)
    lines = seen["cgroup"].splitlines()
    if any(line.split(":")[1] == "pids" for line in lines):  # v1: one group per controller
        wanted = ("memory", "pids", "freezer", "devices", "cpuset")
        lines = [line for line in lines if line.split(":")[1] in wanted]
    else:  # v2: the one leaf
        lines = [line for line in lines if line.startswith("0::")]
    assert lines
    for line in lines:  # still in every group it was given
        assert line.endswith(ident), line


@root_only
def test_the_workload_keeps_the_capabilities_it_was_not_denied(capfd):
    seen, _ = _escape(ProcessRuntime(), capfd)
    kept = _capabilities() & ~sum(1 << cap for cap in DROPPED_CAPABILITIES)
    assert seen["effective"] == kept


@root_only
def test_the_host_keeps_its_cgroup_file_systems_writable(capfd):
    _escape(ProcessRuntime(), capfd)
    own = CgroupFS.read().process_directory("pids")
    assert own is not None
    probe = own.path / f"accelkit-probe-{os.getpid()}"
    probe.mkdir()  # the remount was the workload's mount namespace's alone
    probe.rmdir()


@root_only
def test_the_runtime_says_the_cgroups_are_read_only_for_the_workload():
    handle, _ = run(_run_to_end(ProcessRuntime(), ["true"]))
    assert handle.details["read_only_cgroups"] == "1"
    assert any("read-only" in line for line in ProcessRuntime().describe(handle))


@root_only
def test_a_root_accelkit_without_cap_sys_admin_says_the_workload_can_walk_out(monkeypatch):
    monkeypatch.setattr("accelkit.runtime.process._has_capability", lambda _number: False)
    handle, status = run(_run_to_end(ProcessRuntime(), ["true"]))
    assert status == 0
    assert "read_only_cgroups" not in handle.details
    assert "membership: a root workload can move itself out" in handle.details["missing"]


@root_only
def test_pids_max_is_the_launch_specs_and_overrides_the_runtimes(capfd):
    script = (
        "lines = [l.strip().split(':', 2) for l in open('/proc/self/cgroup')]; "
        "v1 = [p for _, c, p in lines if c == 'pids']; "
        "path = '/sys/fs/cgroup/pids' + v1[0] if v1 else '/sys/fs/cgroup' + lines[0][2]; "
        "print(open(path + '/pids.max').read())"
    )
    capfd.readouterr()
    handle, status = run(
        _run_to_end(ProcessRuntime(pids_max=512), [sys.executable, "-c", script], 37)
    )
    assert status == 0
    assert capfd.readouterr().out.strip() == "37"
    assert handle.details["pids_max"] == "37"
    assert any("(pids.max 37)" in line for line in ProcessRuntime().describe(handle))


FORK_BOMB = r"""
import errno, os, sys, time
children = 0
while True:
    try:
        pid = os.fork()
    except OSError as exc:
        print("refused", errno.errorcode[exc.errno], children, flush=True)
        time.sleep(600)  # holding every process it could make
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    children += 1
"""


@root_only
def test_a_fork_bomb_stops_at_pids_max(capfd):
    capfd.readouterr()

    async def main() -> tuple[int, str]:
        runtime = ProcessRuntime()
        workload = await runtime.new_workload(AGENT)
        spec = LaunchSpec(
            AGENT,
            workload,
            [sys.executable, "-c", FORK_BOMB],
            base_env=os.environ,
            memory_limit_required=False,
            pids_max=20,
        )
        handle = await runtime.create(spec)
        try:
            if "pids" not in WorkloadCgroups.from_details(handle.ident, handle.details).dirs:
                return -1, "no pids controller: no bomb without a limit"
            await runtime.start(handle)
            leader = await asyncio.create_subprocess_exec("true")  # the node still forks
            await leader.wait()
            cgroups = WorkloadCgroups.from_details(handle.ident, handle.details)
            while True:  # the bomb's children sleep: wait for its report, not for time
                out = capfd.readouterr().out
                if "refused" in out:
                    break
                await asyncio.sleep(0.05)
            return len(cgroups.pids()), out
        finally:
            await runtime.stop(handle, 0)
            await runtime.close()

    count, out = run(main())
    if count < 0:
        pytest.skip(out)
    words = out.split()
    assert words[:2] == ["refused", "EAGAIN"]
    assert int(words[2]) == 19  # the bomb and 19 children: 20 processes
    assert count == 20


#: a group of the test's own in the unified hierarchy, as "this process's cgroup" (v2 code path)
@pytest.fixture
def unified_root(tmp_path) -> Iterator[Path]:
    if _PROBLEM is not None:
        pytest.skip(_PROBLEM)  # failed by _required where required
    mount = next(
        (Path(m.mount_point) for m in CgroupFS.read().mounts if m.version == 2),
        None,
    )
    if mount is None:
        pytest.skip("no cgroup v2 hierarchy is mounted here")
    group = mount / f"accelkit-test-{os.getpid()}-{tmp_path.name}"
    group.mkdir()
    try:
        yield fake_root(tmp_path, mount, group)
    finally:
        drain_and_remove(group)


def test_on_the_unified_hierarchy_a_root_workload_cannot_leave_its_group(unified_root, capfd):
    seen, ident = _escape(ProcessRuntime(root=unified_root), capfd)
    _assert_contained(seen)
    line = next(x for x in seen["cgroup"].splitlines() if x.startswith("0::"))
    assert line.endswith(f"/{ident}")
