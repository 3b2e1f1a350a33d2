"""The process runtime against the real cgroup files of this machine, with real processes.

Each test makes workloads under the test process's own cgroups (as ``accelkit run`` does) and
checks the kernel's files and what the processes can do. Tests marked ``v1`` or ``v2`` check one
version's files; those marked ``contained`` check what the kernel does to the processes and run
on either. Where the machine has no such hierarchy (not root, no memory controller) they skip
with the reason. The last test runs the v2 code on the unified hierarchy, which a hybrid host
mounts too (without controllers), so that real v2 groups are made, killed and removed there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil
import pytest

from accelkit.cgroup import CgroupFS
from accelkit.errors import WorkloadError
from accelkit.runtime import LaunchSpec, RuntimeUnavailable, WorkloadHandle
from accelkit.runtime.cgroups import WorkloadCgroups
from accelkit.runtime.process import ProcessRuntime
from accelkit.runtime.process_stamp import ProcessStamp
from accelkit.runtime.process_tree import ProcessTree
from accelkit.runtime.render.process import ProcessPlan
from accelkit.types import AgentId, Mount, WorkloadConfig

from ..memory_limit_probes import RESERVE, THREADS
from .unified_cgroup import drain_and_remove, fake_root

pytestmark = pytest.mark.slow  # real processes, real cgroups

AGENT = AgentId("agent-1")
GIB = 1024**3


def _v1_problem() -> str | None:
    if os.geteuid() != 0:
        return "cgroup tests need root"
    fs = CgroupFS.read()
    for controller in ("memory", "cpuset", "pids", "freezer", "devices"):
        own = fs.process_directory(controller)
        if own is None or own.version != 1:
            return f"no cgroup v1 {controller} hierarchy here"
        if not os.access(own.path, os.W_OK):
            return f"cannot write {own.path}"
    return None


def _v2_problem() -> str | None:
    if os.geteuid() != 0:
        return "cgroup tests need root"
    own = CgroupFS.read().process_directory("memory")
    if own is None or own.version != 2:
        return "no cgroup v2 memory controller here (cgroup v1 or hybrid)"
    if "memory" not in (own.read("cgroup.controllers") or "").split():
        return f"the memory controller is not delegated to {own.path}"
    return None


_V1_PROBLEM, _V2_PROBLEM = _v1_problem(), _v2_problem()
v1 = pytest.mark.skipif(_V1_PROBLEM is not None, reason=_V1_PROBLEM or "")
v2 = pytest.mark.skipif(_V2_PROBLEM is not None, reason=_V2_PROBLEM or "")
contained = pytest.mark.skipif(
    _V1_PROBLEM is not None and _V2_PROBLEM is not None,
    reason=f"{_V1_PROBLEM}; {_V2_PROBLEM}",
)


#: the workloads a test launched: none may outlive it, even when it fails
_LAUNCHED: list[WorkloadHandle] = []


@pytest.fixture(autouse=True)
def _stop_what_was_launched() -> Iterator[None]:
    yield
    while _LAUNCHED:  # another runtime, through the handle alone
        asyncio.run(ProcessRuntime().stop(_LAUNCHED.pop(), 0))


@pytest.fixture
def runtime() -> Iterator[ProcessRuntime]:
    made = ProcessRuntime(pids_max=512)
    yield made
    asyncio.run(made.close())  # the launcher it may keep ready


async def launch(
    runtime: ProcessRuntime,
    argv: Sequence[str],
    *,
    config: WorkloadConfig | None = None,
    nodes: Sequence[str] = (),
    required: bool = True,
) -> WorkloadHandle:
    workload = await runtime.new_workload(AGENT)
    spec = LaunchSpec(
        AGENT,
        workload,
        list(argv),
        config or WorkloadConfig(),
        base_env=os.environ,
        node_device_nodes=frozenset(nodes),
        memory_limit_required=required,
    )
    try:
        handle = await runtime.create(spec)
    except BaseException:
        await runtime.discard(workload, None)  # as the runner does: the launcher exits
        raise
    _LAUNCHED.append(handle)
    await runtime.start(handle)
    return handle


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


@v1
def test_limits_are_in_the_cgroup_files_and_the_leader_is_in_them_before_exec(runtime):
    config = WorkloadConfig(memory_limit=GIB, cpuset_cpus=[0])

    files = (
        "memory/memory.limit_in_bytes",
        "memory/memory.memsw.limit_in_bytes",
        "cpuset/cpuset.cpus",
        "cpuset/cpuset.mems",
        "pids/pids.max",
    )

    async def main() -> tuple[WorkloadHandle, str, dict[str, str], bool, bool]:
        handle = await launch(runtime, ["sleep", "30"], config=config)
        pid = int(handle.details["leader_pid"])
        cgroup_text = Path(f"/proc/{pid}/cgroup").read_text()
        dirs = WorkloadCgroups.from_details(handle.ident, handle.details).dirs
        seen = {}
        for name in files:
            controller, _, file = name.partition("/")
            with contextlib.suppress(FileNotFoundError):
                seen[name] = (dirs[controller] / file).read_text().strip()
        alive = await runtime.is_alive(handle)
        await runtime.stop(handle, 0)
        return handle, cgroup_text, seen, bool(alive), bool(await runtime.is_alive(handle))

    handle, cgroup_text, seen, alive, alive_after_stop = run(main())
    dirs = WorkloadCgroups.from_details(handle.ident, handle.details).dirs
    assert handle.runtime == "process"
    assert handle.ident == f"accelkit/agent-1/pid-{handle.details['leader_pid']}"
    assert set(dirs) == {"memory", "cpuset", "pids", "freezer", "devices"}
    assert seen["memory/memory.limit_in_bytes"] == str(GIB)
    assert seen.get("memory/memory.memsw.limit_in_bytes", str(GIB)) == str(GIB)
    assert seen["cpuset/cpuset.cpus"] == "0"
    assert seen["cpuset/cpuset.mems"] != ""  # copied from the parent: v1 children start empty
    assert seen["pids/pids.max"] == "512"
    for controller in ("memory", "cpuset", "pids", "freezer", "devices"):
        assert f"{controller}:" in cgroup_text
    assert cgroup_text.count(handle.ident) == 5  # the exec'd command is in every group
    assert alive
    assert not alive_after_stop
    assert not any(d.exists() for d in dirs.values())


@v2
def test_on_v2_the_limits_are_in_the_leaf_and_the_leader_is_in_it_before_exec(runtime):
    config = WorkloadConfig(memory_limit=GIB, cpuset_cpus=[0])

    async def main() -> tuple[WorkloadHandle, str, dict[str, str], bool]:
        handle = await launch(runtime, ["sleep", "30"], config=config)
        pid = int(handle.details["leader_pid"])
        cgroup_text = Path(f"/proc/{pid}/cgroup").read_text()
        leaf = WorkloadCgroups.from_details(handle.ident, handle.details).dirs["unified"]
        seen = {}
        for file in ("memory.max", "memory.swap.max", "cpuset.cpus", "pids.max"):
            with contextlib.suppress(FileNotFoundError):
                seen[file] = (leaf / file).read_text().strip()
        alive = await runtime.is_alive(handle)
        await runtime.stop(handle, 0)
        return handle, cgroup_text, seen, bool(alive)

    handle, cgroup_text, seen, alive = run(main())
    dirs = WorkloadCgroups.from_details(handle.ident, handle.details).dirs
    assert handle.ident == f"accelkit/agent-1/pid-{handle.details['leader_pid']}"
    assert set(dirs) >= {"unified", "memory"}
    assert seen["memory.max"] == str(GIB)
    assert seen.get("memory.swap.max", "0") == "0"
    if "cpuset" in dirs:
        assert seen["cpuset.cpus"] == "0"
    if "pids" in dirs:
        assert seen["pids.max"] == "512"
    (line,) = cgroup_text.splitlines()  # the exec'd command is in the leaf
    assert line.startswith("0::")
    assert line.endswith(handle.ident)
    assert alive
    assert not dirs["unified"].exists()


def _device(path: Path, like: str) -> str:
    info = os.stat(like)
    os.mknod(path, 0o666 | stat.S_IFCHR, info.st_rdev)
    return str(path)


OPEN_BOTH = """
import errno, sys
for path in sys.argv[1:]:
    try:
        open(path, "rb").close()
        print(path, "ok")
    except OSError as exc:
        print(path, errno.errorcode[exc.errno])
"""


@v1
def test_device_nodes_not_granted_are_denied(runtime, tmp_path, capfd):
    denied = _device(tmp_path / "accel0", "/dev/full")
    granted = _device(tmp_path / "accel1", "/dev/zero")
    config = WorkloadConfig(mounts=[Mount.device(granted)])

    async def main() -> int:
        handle = await launch(
            runtime, [*py(OPEN_BOTH), denied, granted], config=config, nodes=[denied, granted]
        )
        return await runtime.wait(handle)

    assert run(main()) == 0
    out = capfd.readouterr().out.split("\n")
    assert f"{denied} EPERM" in out
    assert f"{granted} ok" in out
    with open(denied, "rb"):  # only the workload is denied
        pass


def test_a_node_device_path_that_is_not_a_device_is_refused(runtime, tmp_path):
    plain = tmp_path / "not-a-device"
    plain.write_text("")

    async def main() -> None:
        await launch(runtime, ["true"], nodes=[str(plain)])

    with pytest.raises(Exception, match="is not a device node"):
        run(main())


CHILD_OUTLIVES_LEADER = """
import pathlib, subprocess, sys
out = pathlib.Path(sys.argv[1])
code = "import os, pathlib, sys, time\\n"
code += "os.setsid()\\n" if sys.argv[2] == "daemon" else ""
code += "pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))\\ntime.sleep(300)"
subprocess.Popen([sys.executable, "-c", code, str(out)])
"""


def _pid_from(path: Path) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError, ValueError):
            return int(path.read_text())
        time.sleep(0.01)
    pytest.fail(f"{path} was never written")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@contained
@pytest.mark.parametrize("kind", ["child", "daemon"])
def test_a_dead_leader_with_a_live_child_is_alive_and_stop_kills_the_child(runtime, tmp_path, kind):
    pidfile = tmp_path / "child.pid"

    async def main() -> tuple[WorkloadHandle, bool, bool]:
        handle = await launch(runtime, [*py(CHILD_OUTLIVES_LEADER), str(pidfile), kind])
        leader = psutil.Process(int(handle.details["leader_pid"]))
        _pid_from(pidfile)
        with contextlib.suppress(psutil.NoSuchProcess):
            leader.wait(30)
        waiting = asyncio.ensure_future(runtime.wait(handle))
        await asyncio.sleep(0.3)
        still_waiting = not waiting.done()
        other = ProcessRuntime()  # another process's view: the handle alone
        alive = await other.is_alive(handle)
        await runtime.stop(handle, 1)
        assert await asyncio.wait_for(waiting, 10) == 0  # the leader's status
        return handle, still_waiting, bool(alive)

    handle, still_waiting, alive = run(main())
    assert still_waiting  # wait() does not return while the child runs
    assert alive
    assert _gone(_pid_from(pidfile))
    assert run(ProcessRuntime().is_alive(handle)) is False


IGNORES_TERM = """
import pathlib, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: pathlib.Path(sys.argv[1]).write_text("term"))
pathlib.Path(sys.argv[1]).write_text("ready")
while True:
    time.sleep(1)
"""


@contained
def test_a_leader_ignoring_sigterm_is_killed_after_the_grace(runtime, tmp_path):
    marker = tmp_path / "marker"

    async def main() -> tuple[float, int]:
        handle = await launch(runtime, [*py(IGNORES_TERM), str(marker)])
        while not marker.exists():
            await asyncio.sleep(0.01)
        started = time.monotonic()
        waiting = asyncio.ensure_future(runtime.wait(handle))
        await runtime.stop(handle, 0.5)
        return time.monotonic() - started, await waiting

    took, status = run(main())
    assert marker.read_text() == "term"  # it got SIGTERM first
    assert 0.5 <= took < 10
    assert status == 128 + signal.SIGKILL


@contained
def test_signal_reaches_every_process_of_the_workload(runtime, tmp_path):
    pidfile = tmp_path / "child.pid"

    async def main() -> int:
        handle = await launch(runtime, [*py(CHILD_OUTLIVES_LEADER), str(pidfile), "daemon"])
        _pid_from(pidfile)
        await runtime.signal(handle, signal.SIGTERM)
        return await asyncio.wait_for(runtime.wait(handle), 30)

    assert run(main()) == 0  # the leader had exited by itself
    assert _gone(_pid_from(pidfile))


def run_to_its_end(
    runtime: ProcessRuntime, code: str, config: WorkloadConfig
) -> tuple[int, list[str]]:
    """Run ``code`` under ``config`` until it exits; its status and the runtime's notes on it."""

    async def main() -> tuple[int, list[str]]:
        handle = await launch(runtime, py(code), config=config)
        status = await runtime.wait(handle)
        notes = await runtime.exit_notes(handle)
        await runtime.stop(handle, 0)
        return status, notes

    return run(main())


FILL = """
chunks = []
while True:
    chunks.append(bytearray(16 * 1024 * 1024))
"""


@contained
def test_filling_the_memory_limit_is_an_oom_kill_with_status_137(runtime):
    status, notes = run_to_its_end(runtime, FILL, WorkloadConfig(memory_limit=64 * 1024**2))
    assert status == 137
    assert len(notes) == 1
    assert notes[0].startswith("out of memory at its limit of 64M: the kernel killed 1 process")
    assert "not the command itself" not in notes[0]


CHILD_FILLS = f"""
import subprocess, sys
child = subprocess.run([sys.executable, "-c", {FILL.strip()!r}])
print("child", child.returncode, flush=True)
"""


@contained
def test_an_oom_kill_of_a_child_is_the_childs_not_the_workloads(runtime):
    """The command survives its child's OOM kill and exits 0: the note says so."""
    config = WorkloadConfig(memory_limit=64 * 1024**2)
    status, notes = run_to_its_end(runtime, CHILD_FILLS, config)
    assert status == 0
    assert len(notes) == 1
    assert "the kernel killed 1 process(es) of the workload" in notes[0]
    assert notes[0].endswith("not the command itself, which exited with status 0")


@contained
@pytest.mark.parametrize(("code", "said"), [(THREADS, "200 threads ok"), (RESERVE, "reserved ok")])
def test_a_1g_limit_bounds_memory_not_address_space(runtime, capfd, code, said):
    config = WorkloadConfig(memory_limit=GIB)

    async def main() -> int:
        handle = await launch(runtime, py(code), config=config)
        return await runtime.wait(handle)

    assert run(main()) == 0, capfd.readouterr().err
    assert said in capfd.readouterr().out


@contained
def test_a_command_that_cannot_start_fails_and_leaves_no_cgroup(runtime):
    async def main() -> WorkloadHandle:
        workload = await runtime.new_workload(AGENT)
        handle = await runtime.create(LaunchSpec(AGENT, workload, ["/nonexistent/command"]))
        with pytest.raises(Exception, match="cannot run '/nonexistent/command'"):
            await runtime.start(handle)
        await runtime.stop(handle, 0)
        return handle

    handle = run(main())
    dirs = WorkloadCgroups.from_details(handle.ident, handle.details).dirs
    assert dirs
    assert not any(d.exists() for d in dirs.values())


@contained
def test_a_discarded_workload_runs_nothing_and_leaves_nothing(runtime):
    async def main() -> tuple[int, WorkloadHandle]:
        workload = await runtime.new_workload(AGENT)
        pid = int(workload.id.removeprefix("pid:"))
        handle = await runtime.create(LaunchSpec(AGENT, workload, ["sleep", "300"]))
        await runtime.discard(workload, handle)
        return pid, handle

    pid, handle = run(main())
    assert _gone(pid)
    assert run(runtime.is_alive(handle)) is False


def _fake_root(tmp_path: Path, version: int) -> Path:
    """A root whose cgroup hierarchies (v1, or v2) are to live on a read-only file system."""
    root = tmp_path / "root"
    (root / "proc/self").mkdir(parents=True)
    lines, memberships = [], []
    if version == 2:  # in a group of its own, with a shell's process beside this one
        lines.append("30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw")
        memberships.append("0::/job")
    for number, controller in enumerate(("memory", "cpuset", "pids", "freezer", "devices")):
        if version == 1:
            lines.append(
                f"{40 + number} 31 0:{40 + number} / /sys/fs/cgroup/{controller} rw - cgroup "
                f"cgroup rw,{controller}"
            )
            memberships.append(f"{number + 1}:{controller}:/")
    (root / "proc/self/mountinfo").write_text("\n".join(lines) + "\n")
    (root / "proc/self/cgroup").write_text("\n".join(memberships) + "\n")
    (root / "sys/fs/cgroup").mkdir(parents=True)
    return root


def _fill(tree: Path, version: int) -> None:
    if version == 1:
        for controller in ("memory", "cpuset", "pids", "freezer", "devices"):
            (tree / controller).mkdir()
        return
    job = tree / "job"
    job.mkdir()
    (job / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (job / "cgroup.subtree_control").write_text("")
    (job / "cgroup.procs").write_text(f"1\n{os.getpid()}\n")


@pytest.fixture(params=[1, 2], ids=["v1", "v2"])
def read_only_tree(request, tmp_path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root")
    root = _fake_root(tmp_path, request.param)
    tree = root / "sys/fs/cgroup"
    mounted = subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(tree)], check=False)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        _fill(tree, request.param)
        subprocess.run(["mount", "-o", "remount,ro", str(tree)], check=True)
        yield root
    finally:
        subprocess.run(["umount", str(tree)], check=True)


def test_a_cgroup_tree_accelkit_may_not_write_refuses_a_memory_limit(read_only_tree):
    runtime = ProcessRuntime(root=read_only_tree)

    async def main() -> None:
        await launch(runtime, ["true"], config=WorkloadConfig(memory_limit=GIB))

    with pytest.raises(RuntimeUnavailable) as raised:
        run(main())
    message = str(raised.value)
    assert "cannot enforce the memory limit of 1G" in message
    assert "Read-only file system" in message
    assert "--no-memory-limit" in message


def test_without_cgroups_the_run_says_what_is_missing_and_still_runs(read_only_tree, tmp_path):
    runtime = ProcessRuntime(root=read_only_tree)
    marker = tmp_path / "ran"

    async def main() -> tuple[WorkloadHandle, int]:
        config = WorkloadConfig(memory_limit=GIB)
        handle = await launch(runtime, ["touch", str(marker)], config=config, required=False)
        return handle, await runtime.wait(handle)

    handle, status = run(main())
    assert status == 0
    assert marker.exists()
    missing = handle.details["missing"]
    if handle.details["cgroup_version"] == "1":
        controllers = ("memory", "cpuset", "pids", "freezer", "devices")
    else:  # v2's device isolation is never the process runtime's: it says so instead
        controllers = ("memory", "cpuset", "pids")
        assert "devices: device isolation on cgroup v2 needs the container runtime" in missing
    for controller in controllers:
        assert f"{controller}: cannot create a cgroup" in missing
        assert "Read-only file system" in missing
    lines = runtime.describe(handle)
    assert lines[0].startswith("process runtime: no cgroup")
    assert any("not contained: devices" in line for line in lines)
    assert run(runtime.is_alive(handle)) is False  # by the leader's stamp
    run(runtime.stop(handle, 0))


@pytest.mark.parametrize("call", ["wait", "stop"])
def test_a_v2_workload_whose_processes_are_still_exiting_is_alive_and_waited_for(tmp_path, call):
    """cgroup v2 stops listing a process once it starts to exit, and a CUDA program can take
    seconds to exit while the driver frees its GPU memory: until the kernel says the group is
    empty, the workload holds its devices, is waited for, and its group cannot be removed."""
    leaf = tmp_path / "accelkit/agent-1/pid-42"
    leaf.mkdir(parents=True)
    (leaf / "cgroup.procs").write_text("")
    (leaf / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    cgroups = WorkloadCgroups(2, "accelkit/agent-1/pid-42", {"unified": leaf, "memory": leaf})
    handle = WorkloadHandle("process", cgroups.relative, cgroups.to_details())
    assert run(ProcessRuntime().is_alive(handle)) is True

    def exit_later() -> None:  # what the kernel does once the last process is gone
        time.sleep(0.3)
        (leaf / "cgroup.events").unlink()
        (leaf / "cgroup.procs").unlink()

    exiting = threading.Thread(target=exit_later)
    exiting.start()
    started = time.monotonic()
    try:
        if call == "wait":  # another process's wait: through the handle alone
            assert run(ProcessRuntime().wait(handle)) == 0
        else:
            run(ProcessRuntime().stop(handle, 0))
        took = time.monotonic() - started
    finally:
        exiting.join()
    assert took >= 0.3
    assert leaf.exists() is (call == "wait")
    assert run(ProcessRuntime().is_alive(handle)) is False


def test_a_workload_not_made_by_this_runtime_is_refused():
    from accelkit.types import Workload

    async def main() -> None:
        await ProcessRuntime().create(LaunchSpec(AGENT, Workload.process_tree("pid:1"), ["true"]))

    with pytest.raises(RuntimeUnavailable, match="not made by this process runtime"):
        run(main())
    with pytest.raises(Exception, match="not created by this process runtime"):
        run(ProcessRuntime().start(WorkloadHandle("process", "accelkit/a/pid-1")))


def test_a_handle_without_cgroups_or_leader_cannot_tell():
    handle = WorkloadHandle("process", "accelkit/a/pid-1", {"cgroup_version": "x"})
    assert run(ProcessRuntime().is_alive(handle)) is None


@v1
def test_the_launcher_joins_the_cgroups_its_plan_names_before_it_execs(tmp_path, capfd):
    own = CgroupFS.read().process_directory("pids")
    assert own is not None
    group = own.path / f"accelkit-launcher-test-{os.getpid()}"
    group.mkdir()
    try:

        async def main() -> int:
            tree = await ProcessTree.start()
            plan = ProcessPlan(env=dict(os.environ))
            tree.launch(["cat", "/proc/self/cgroup"], plan, [str(group / "cgroup.procs")])
            return await tree.wait()

        assert run(main()) == 0
        lines = capfd.readouterr().out.splitlines()
        assert any(":pids:" in line and line.endswith(f"/{group.name}") for line in lines)
    finally:
        group.rmdir()


def test_a_cgroup_the_launcher_cannot_join_fails_the_launch(tmp_path):
    async def main() -> None:
        tree = await ProcessTree.start()
        try:
            tree.launch(["true"], ProcessPlan(), [str(tmp_path / "missing" / "cgroup.procs")])
        finally:
            await tree.wait()

    with pytest.raises(WorkloadError, match=r"setup: .*No such file or directory"):
        run(main())


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "no-pidfd"])
def test_the_leader_is_waited_for_by_any_number_of_waiters(monkeypatch, pidfd):
    if not pidfd:  # an old kernel: a thread waits instead

        def missing(_pid: int) -> int:
            raise OSError(38, "Function not implemented")

        monkeypatch.setattr(os, "pidfd_open", missing)

    async def main() -> list[int]:
        tree = await ProcessTree.start()
        tree.launch([sys.executable, "-c", "import sys; sys.exit(5)"], ProcessPlan())
        return list(await asyncio.gather(tree.wait(), tree.wait(), tree.wait()))

    assert run(main()) == [5, 5, 5]


def _spare_pid(runtime: ProcessRuntime) -> int | None:
    return runtime.spare_launcher


@contained
def test_from_its_second_workload_on_the_runtime_keeps_a_launcher_ready(runtime):
    async def one() -> str:
        handle = await launch(runtime, ["true"])
        assert await runtime.wait(handle) == 0
        await runtime.stop(handle, 0)
        return handle.details["leader_pid"]

    async def main() -> tuple[list[int | None], str, bool]:
        spares = []
        await one()
        spares.append(_spare_pid(runtime))  # one workload: none (accelkit run makes one)
        await one()
        spares.append(_spare_pid(runtime))
        third = await one()  # its leader is the launcher kept ready
        spares.append(_spare_pid(runtime))
        kept = spares[1]
        await runtime.close()
        left = kept is not None and ProcessStamp.of(spares[2] or 0) is not None
        return [*spares, _spare_pid(runtime)], third, left

    spares, third, left = run(main())
    assert spares[0] is None
    assert spares[1] is not None
    assert third == str(spares[1])
    assert spares[2] not in (None, spares[1])
    assert spares[3] is None  # closed
    assert not left  # close() ended the spare


@contained
def test_a_spare_launcher_that_was_killed_is_replaced(runtime):
    async def main() -> tuple[int, str]:
        for _ in range(2):
            handle = await launch(runtime, ["true"])
            await runtime.wait(handle)
            await runtime.stop(handle, 0)
        spare = _spare_pid(runtime)
        assert spare is not None
        os.kill(spare, signal.SIGKILL)
        await asyncio.sleep(0.05)
        handle = await launch(runtime, ["true"])
        status = await runtime.wait(handle)
        await runtime.stop(handle, 0)
        await runtime.close()
        return spare, f"{status}:{handle.details['leader_pid']}"

    spare, outcome = run(main())
    status, leader = outcome.split(":")
    assert status == "0"
    assert leader != str(spare)


@v1
def test_on_v1_the_leader_joins_its_cgroups_itself_as_it_is_launched(runtime):
    """No process is moved by the runtime (that waits out a kernel grace period): the cgroups
    are empty until the launcher, given its plan, joins them before it execs."""

    async def main() -> tuple[set[int], set[int], int, str]:
        workload = await runtime.new_workload(AGENT)
        spec = LaunchSpec(AGENT, workload, ["sleep", "30"], base_env=os.environ)
        handle = await runtime.create(spec)
        _LAUNCHED.append(handle)
        cgroups = WorkloadCgroups.from_details(handle.ident, handle.details)
        before = cgroups.pids()
        await runtime.start(handle)
        leader = int(handle.details["leader_pid"])
        joined = Path(f"/proc/{leader}/cgroup").read_text()
        after = cgroups.pids()
        await runtime.stop(handle, 0)
        return before, after, leader, joined

    before, after, leader, joined = run(main())
    assert before == set()
    assert after == {leader}
    for controller in ("memory", "cpuset", "pids", "freezer", "devices"):
        line = next(x for x in joined.splitlines() if x.split(":")[1] == controller)
        assert line.endswith(f"/accelkit/agent-1/pid-{leader}")


@v1
def test_a_workload_under_an_agent_group_another_setup_just_made_gets_its_cpus(runtime):
    # Two runs of one agent set up at once: one has made accelkit/<agent> (a v1 cpuset starts
    # with no CPUs) and not filled it in yet when the other makes its workload's group under it.
    agent = AgentId(f"agent-race-{os.getpid()}")
    own = CgroupFS.read().process_directory("cpuset")
    assert own is not None
    level = own.path / "accelkit" / agent
    level.mkdir(parents=True)
    assert (level / "cpuset.cpus").read_text().strip() == ""  # as the kernel makes it

    async def main() -> tuple[int, str]:
        workload = await runtime.new_workload(agent)
        spec = LaunchSpec(
            agent,
            workload,
            ["true"],
            WorkloadConfig(cpuset_cpus=[0]),
            base_env=os.environ,
            memory_limit_required=False,
        )
        handle = await runtime.create(spec)
        _LAUNCHED.append(handle)
        cpus = WorkloadCgroups.from_details(handle.ident, handle.details).dirs["cpuset"]
        await runtime.start(handle)
        return await runtime.wait(handle), (cpus / "cpuset.cpus").read_text().strip()

    try:
        status, cpus = run(main())
    finally:
        with contextlib.suppress(OSError):
            level.rmdir()
    assert status == 0
    assert cpus == "0"


# -- the real unified hierarchy, on any host that mounts one ----------------------------------


def _unified_mount() -> Path | None:
    for mount in CgroupFS.read().mounts:
        if mount.version == 2 and mount.mount_root == "/":
            return Path(mount.mount_point)
    return None


@pytest.fixture
def unified_root(tmp_path) -> Iterator[tuple[Path, Path]]:
    """A root whose ``proc/self`` lists only the unified hierarchy, and a group of the test's
    own in it as "this process's cgroup": the runtime's v2 code then makes real groups there.

    A hybrid host (cgroup v1 controllers) mounts it without controllers, but its groups still
    hold processes, say ``populated`` in ``cgroup.events``, freeze and kill; on a v2 host the
    group gets the controllers the hierarchy hands down.
    """
    if os.geteuid() != 0:
        pytest.skip("making groups in the unified hierarchy needs root")
    mount = _unified_mount()
    if mount is None:
        pytest.skip("no cgroup v2 hierarchy is mounted here")
    group = mount / f"accelkit-test-{os.getpid()}-{tmp_path.name}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a group in {mount}: {exc.strerror}")
    root = fake_root(tmp_path, mount, group)
    try:
        yield root, group
    finally:
        drain_and_remove(group)


def test_on_the_unified_hierarchy_a_workload_is_contained_stopped_and_removed(
    unified_root, tmp_path
):
    """A daemon that left the leader's session is still in the workload's group, keeps it
    alive after the leader exits, and dies when the workload is stopped; the group goes."""
    root, group = unified_root
    runtime = ProcessRuntime(root=root)
    pidfile = tmp_path / "daemon.pid"

    async def main() -> tuple[WorkloadHandle, Path, int, str, bool]:
        argv = [*py(CHILD_OUTLIVES_LEADER), str(pidfile), "daemon"]
        handle = await launch(runtime, argv, required=False)
        daemon = _pid_from(pidfile)
        leaf = WorkloadCgroups.from_details(handle.ident, handle.details).dirs["unified"]
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(int(handle.details["leader_pid"])).wait(30)
        joined = Path(f"/proc/{daemon}/cgroup").read_text()
        alive = await ProcessRuntime(root=root).is_alive(handle)  # another process's view
        await runtime.stop(handle, 1)
        return handle, leaf, daemon, joined, bool(alive)

    handle, leaf, daemon, joined, alive = run(main())
    assert handle.details["cgroup_version"] == "2"
    line = next(x for x in joined.splitlines() if x.startswith("0::"))
    assert line == f"0::/{group.name}/{handle.ident}"
    assert alive
    assert _gone(daemon)
    assert not leaf.exists()
    assert run(ProcessRuntime(root=root).is_alive(handle)) is False


@contained
def test_a_workload_that_leaves_nothing_costs_one_trip_to_a_thread(runtime, monkeypatch):
    """Making the groups is one trip to a thread; the limits (v1), the wait's look at the
    groups, the leftover processes, the OOM count and removing the emptied groups cost no trip
    of their own."""
    import accelkit.runtime.process as module

    trips: list[object] = []
    real = module._in_thread

    async def counted(call):  # type: ignore[no-untyped-def]
        trips.append(call)
        return await real(call)

    monkeypatch.setattr(module, "_in_thread", counted)

    async def main() -> tuple[int, list[str]]:
        handle = await launch(runtime, ["true"])
        status = await runtime.wait(handle, on_leftovers=lambda *_: None)
        notes = await runtime.exit_notes(handle)
        await runtime.stop(handle, 0)
        return status, notes

    assert run(main()) == (0, [])
    limits = 0 if _V1_PROBLEM is None else 1
    assert len(trips) == 1 + limits
