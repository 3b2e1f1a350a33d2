"""The runner in-process: the cgroups' cpuset and memory limit reach the command; no RLIMIT_AS."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import stat
import sys
import threading
from decimal import Decimal

import psutil
import pytest

from accelkit.cgroup import CgroupFS
from accelkit.config import load_host_config
from accelkit.errors import InvalidResourceArgument, WorkloadError
from accelkit.node import Node
from accelkit.runtime import RuntimeUnavailable
from accelkit.runtime.cgroups import V2_DEVICES_NOTE
from accelkit.runtime.process import ProcessRuntime
from accelkit.types import AgentId, SlotName, WorkloadConfig
from accelkit.workload import Ledger
from accelkit.workload.runner import FORWARDED_SIGNALS, announced_gaps, run_workload
from accelkit_mock.plugin import MockLifecycleHook, MockPlugin

PROBE = """
import json, os, pathlib, resource, sys
from accelkit.cgroup import CgroupFS
memory = CgroupFS.read().process_directory("memory")
print(json.dumps({"cpus": sorted(os.sched_getaffinity(0)),
                  "limit": memory.read("memory.limit_in_bytes") if memory else None,
                  "rlimit": resource.getrlimit(resource.RLIMIT_AS)[0],
                  "cgroup": pathlib.Path("/proc/self/cgroup").read_text(),
                  "env": os.environ.get("MOCK_CPU_DEVICES")}))
"""


@pytest.fixture
def config(mock_node):
    return load_host_config(mock_node(cpus=1, mem="4G"))


def test_cpuset_and_memory_limit_reach_the_command(config, monkeypatch, tmp_path, capfd):
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
            slots = {SlotName("cpu"): Decimal(1), SlotName("mem"): Decimal(2 * 1024**3)}
            return await run_workload(
                host,
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
    assert seen["rlimit"] == resource.RLIM_INFINITY  # never RLIMIT_AS
    assert "/accelkit/agent-1/pid-" in seen["cgroup"]
    if seen["limit"] is not None:  # cgroup v1 (this machine, CI)
        assert int(seen["limit"]) == 2 * 1024**3
    assert any(line.startswith("workload pid:") for line in lines)
    assert steps == [
        "booked",
        "pre_create:cpu",
        "pre_create:mem",
        "prepared",
        "created",
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
                    host,
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


def test_an_oom_kill_is_reported_with_status_137_and_torn_down(config, monkeypatch):
    original = MockLifecycleHook.pre_create

    async def pre_create(self):
        base = await original(self)
        if self.key == "mem":
            return WorkloadConfig(env_vars=base.env_vars, memory_limit=64 * 1024**2)
        return base

    monkeypatch.setattr(MockLifecycleHook, "pre_create", pre_create)
    lines: list[str] = []
    fill = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 * 1024))"

    async def main():
        async with Node.open(config) as host:
            slots = {SlotName("cpu"): Decimal(1), SlotName("mem"): Decimal(64 * 1024**2)}
            return await run_workload(
                host, AgentId("agent-1"), slots, [sys.executable, "-c", fill], echo=lines.append
            )

    status = asyncio.run(main())
    said = "\n".join(lines)
    if "cannot enforce the memory limit" in said:
        pytest.skip("no usable memory controller here")
    assert status == 137
    assert "out of memory at its limit of 64M: the kernel killed 1 process(es)" in said
    assert Ledger(config.resource.state_dir).read_all() == {}


def _no_cgroup_root(tmp_path):
    """A root whose cgroup v1 hierarchies are listed but cannot be written (no directories)."""
    root = tmp_path / "root"
    (root / "proc/self").mkdir(parents=True)
    controllers = ("memory", "cpuset", "pids", "freezer", "devices")
    (root / "proc/self/mountinfo").write_text(
        "".join(
            f"{40 + i} 31 0:{40 + i} / /sys/fs/cgroup/{c} rw - cgroup cgroup rw,{c}\n"
            for i, c in enumerate(controllers)
        )
    )
    (root / "proc/self/cgroup").write_text(
        "".join(f"{i + 1}:{c}:/" + "\n" for i, c in enumerate(controllers))
    )
    return root


@pytest.mark.parametrize("no_memory_limit", [False, True])
def test_a_memory_limit_without_a_memory_controller_is_refused_unless_accepted(
    config, monkeypatch, tmp_path, no_memory_limit
):
    original = MockLifecycleHook.pre_create

    async def pre_create(self):
        base = await original(self)
        if self.key == "mem":
            return WorkloadConfig(env_vars=base.env_vars, memory_limit=1024**3)
        return base

    monkeypatch.setattr(MockLifecycleHook, "pre_create", pre_create)
    runtime = ProcessRuntime(root=_no_cgroup_root(tmp_path))
    lines: list[str] = []

    async def main():
        async with Node.open(config, runtimes={"process": runtime}) as host:
            slots = {SlotName("cpu"): Decimal(1), SlotName("mem"): Decimal(1024**3)}
            try:
                return await run_workload(
                    host,
                    AgentId("agent-1"),
                    slots,
                    ["true"],
                    no_memory_limit=no_memory_limit,
                    echo=lines.append,
                )
            finally:
                contexts = host.agents[AgentId("agent-1")].contexts
                held = [
                    amount
                    for ctx in contexts.values()
                    for per_device in ctx.alloc_map.allocations.values()
                    for amount in per_device.values()
                    if amount
                ]
                assert held == []  # nothing booked is left behind

    if no_memory_limit:
        assert asyncio.run(main()) == 0
        said = "\n".join(lines)
        assert "warning: not contained: memory: cannot create a cgroup" in said
    else:
        with pytest.raises(RuntimeUnavailable) as raised:
            asyncio.run(main())
        assert "cannot enforce the memory limit of 1G" in str(raised.value)
        assert "--no-memory-limit" in str(raised.value)
    assert Ledger(config.resource.state_dir).read_all() == {}
    launchers = [p for p in psutil.Process().children() if "launcher.py" in " ".join(p.cmdline())]
    assert launchers == []


OPEN_EACH = """
import errno, sys
for path in sys.argv[1:]:
    try:
        open(path, "rb").close()
        print(path, "ok")
    except OSError as exc:
        print(path, errno.errorcode[exc.errno])
"""


def test_the_device_nodes_of_gpus_not_granted_cannot_be_opened(
    mock_node, monkeypatch, tmp_path, capfd
):
    devices_cgroup = CgroupFS.read().process_directory("devices")
    if os.geteuid() != 0 or devices_cgroup is None or devices_cgroup.version != 1:
        pytest.skip("needs root and a cgroup v1 devices controller")
    config = load_host_config(mock_node(cpus=1, gpus=2))
    nodes = {}
    for number, like in enumerate(("/dev/zero", "/dev/full")):
        nodes[f"cuda{number}"] = str(tmp_path / f"accel{number}")
        os.mknod(nodes[f"cuda{number}"], 0o666 | stat.S_IFCHR, os.stat(like).st_rdev)

    def device_nodes(self, devices):  # the nodes, as a real accelerator plugin names them
        return [nodes[d.device_id] for d in devices] if self.key == "cuda" else []

    monkeypatch.setattr(MockPlugin, "device_nodes", device_nodes)
    argv = [sys.executable, "-c", OPEN_EACH, nodes["cuda0"], nodes["cuda1"]]

    async def main():
        async with Node.open(config) as host:
            slots = {SlotName("cuda.device"): Decimal(1)}
            return await run_workload(host, AgentId("agent-1"), slots, argv)

    assert asyncio.run(main()) == 0
    out = capfd.readouterr().out.splitlines()
    assert f"{nodes['cuda0']} ok" in out  # granted
    assert f"{nodes['cuda1']} EPERM" in out  # another GPU's node


def _trapping_sigterm(pidfile: str) -> list[str]:
    """A command that writes its pid, then exits 7 on SIGTERM (so the signal must reach it)."""
    script = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\n"
        f"open({pidfile!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(60)\n"
    )
    return [sys.executable, "-c", script]


def test_concurrent_runs_of_one_process_each_get_a_forwarded_signal(mock_node, tmp_path):
    config = load_host_config(mock_node(cpus=2))
    pids = [tmp_path / "a.pid", tmp_path / "b.pid"]
    said: list[str] = []

    async def main() -> list[int]:
        async with Node.open(config) as host:
            runs = [
                asyncio.ensure_future(
                    run_workload(
                        host,
                        AgentId("agent-1"),
                        {SlotName("cpu"): Decimal(1)},
                        _trapping_sigterm(str(pid)),
                        grace=30,
                        echo=said.append,
                    )
                )
                for pid in pids
            ]
            while not all(p.exists() and p.read_text() for p in pids):
                if ended := [r for r in runs if r.done()]:  # it failed: say how
                    pytest.fail(f"a run ended before its workload started: {ended[0]!r}: {said}")
                await asyncio.sleep(0.01)
            os.kill(os.getpid(), signal.SIGTERM)  # once, to this process
            return list(await asyncio.gather(*runs))

    assert asyncio.run(main()) == [7, 7]
    assert Ledger(config.resource.state_dir).read_all() == {}


def test_the_signal_handlers_of_the_process_are_back_after_a_run(config):
    seen: list[int] = []

    def own(signum: int, _frame: object) -> None:
        seen.append(signum)

    previous = signal.signal(signal.SIGTERM, own)
    # a run started in the background inherits SIGINT ignored: the test sets its own disposition
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        handlers: list[object] = []

        async def main() -> int:
            async with Node.open(config) as host:
                return await run_workload(
                    host,
                    AgentId("agent-1"),
                    {SlotName("cpu"): Decimal(1)},
                    ["true"],
                    checkpoint=lambda name: (
                        handlers.append(signal.getsignal(signal.SIGTERM))
                        if name == "running"
                        else None
                    ),
                )

        assert asyncio.run(main()) == 0
        assert handlers
        assert handlers[0] is not own  # the run's relay had it meanwhile
        assert signal.getsignal(signal.SIGTERM) is own
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def test_a_run_in_another_thread_works_and_leaves_the_handlers_alone(config):
    before = {signum: signal.getsignal(signum) for signum in FORWARDED_SIGNALS}
    results: list[object] = []

    async def main() -> int:
        async with Node.open(config) as host:
            return await run_workload(
                host, AgentId("agent-1"), {SlotName("cpu"): Decimal(1)}, ["true"]
            )

    def in_thread() -> None:
        try:
            results.append(asyncio.run(main()))
        except BaseException as exc:  # the assertion below shows it
            results.append(exc)

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(60)
    assert results == [0]
    assert {signum: signal.getsignal(signum) for signum in FORWARDED_SIGNALS} == before


@pytest.mark.parametrize(
    ("missing", "warned"),
    [
        ("", ""),
        (f"devices: {V2_DEVICES_NOTE}", ""),
        (
            f"cpuset: controller not delegated to /g; devices: {V2_DEVICES_NOTE}",
            "cpuset: controller not delegated to /g",
        ),
        (
            "memory: cannot create a cgroup under /g: Permission denied",
            "memory: cannot create a cgroup under /g: Permission denied",
        ),
    ],
)
def test_a_run_warns_of_what_it_cannot_contain_but_v2_device_isolation(missing, warned):
    assert announced_gaps(missing) == warned


@pytest.mark.parametrize("pids", [0, -3, True, 2.5, "7"])
def test_a_pids_that_is_no_count_of_processes_is_refused_before_anything_is_booked(config, pids):
    async def main() -> None:
        async with Node.open(config) as node:
            await node.run(AgentId("agent-1"), {SlotName("cpu"): Decimal(1)}, ["true"], pids=pids)

    with pytest.raises(InvalidResourceArgument, match="pids must be a whole number"):
        asyncio.run(main())
    assert Ledger(config.resource.state_dir).read_all() == {}


def test_node_run_passes_pids_to_the_workloads_cgroups(config, capfd):
    own = CgroupFS.read().process_directory("pids")
    if os.geteuid() != 0 or own is None:
        pytest.skip("pids limits are set in cgroups this user may not make")
    script = (
        "lines = [l.strip().split(':', 2) for l in open('/proc/self/cgroup')]; "
        "v1 = [p for _, c, p in lines if c == 'pids']; "
        "path = '/sys/fs/cgroup/pids' + v1[0] if v1 else '/sys/fs/cgroup' + lines[0][2]; "
        "print(open(path + '/pids.max').read())"
    )

    async def main() -> int:
        async with Node.open(config) as node:
            slots = {SlotName("cpu"): Decimal(1)}
            return await node.run(
                AgentId("agent-1"), slots, [sys.executable, "-c", script], pids=11
            )

    assert asyncio.run(main()) == 0
    assert capfd.readouterr().out.strip() == "11"
