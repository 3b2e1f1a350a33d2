"""Crash tests: `accelkit run` killed with SIGKILL at each lifecycle step, then reconciled.

``tests/fixtures/pausing_run.py STEP run ...`` is the real command stopping at a step; the test
kills it there, starts a host on the same ledger, and checks that reconciliation keeps exactly
the live workloads and finishes the dead ones, and that a later run can use the freed devices.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accelkit.cgroup import CgroupFS
from accelkit.config import load_host_config
from accelkit.node import Node
from accelkit.runtime.cgroups import V1_CONTROLLERS
from accelkit.testing.cli_runner import ACCELKIT, cli_env
from accelkit.types import AgentId
from accelkit.workload import Ledger, ProcessStamp

pytestmark = pytest.mark.slow  # crash tests: real processes killed at every step

PAUSING_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "pausing_run.py"
SLOTS = "cuda.device=1,cpu=1,mem=1G"
ORDER = ("cuda", "cpu", "mem")


@pytest.fixture
def node(mock_node) -> Path:
    return mock_node(cpus=1, mem="1G", gpus=1)


def env(**extra: str) -> dict[str, str]:
    base = cli_env()
    return {**base, **extra}


def start(config: Path, command: list[str], pause: str | None = None) -> subprocess.Popen[str]:
    launcher = [sys.executable, str(PAUSING_RUN), pause] if pause else ACCELKIT
    return subprocess.Popen(
        [
            *launcher,
            "run",
            "--config",
            str(config),
            "--agent",
            "agent-1",
            "--slots",
            SLOTS,
            "--",
            *command,
        ],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_pause(process: subprocess.Popen[str], step: str) -> None:
    assert process.stderr is not None
    for line in process.stderr:
        if line.strip() == f"accelkit: paused at {step}":
            return
    pytest.fail(f"the run ended without pausing at {step}: {process.wait()}")


def the_record(config: Path) -> dict:
    [record] = Ledger(config.parent / "state").read_all().values()
    return record.to_json()


def no_records(config: Path) -> bool:
    return Ledger(config.parent / "state").read_all() == {}


def wait_gone(stamp: ProcessStamp) -> None:
    deadline = time.monotonic() + 60  # a guard against hanging, not an assertion on time
    while stamp.is_running() and time.monotonic() < deadline:
        time.sleep(0.02)


def reconcile(config: Path):
    host_config = load_host_config(config)

    async def main():
        async with Node.open(host_config) as host:
            report = host.bookkeeper.last_report  # the node reconciles as it opens
            maps = {
                key: {
                    d: a for per in ctx.alloc_map.allocations.values() for d, a in per.items() if a
                }
                for key, ctx in host.agents[AgentId("agent-1")].contexts.items()
            }
            return report, maps

    return asyncio.run(main())


def later_run_works(config: Path) -> None:
    result = subprocess.run(
        [
            *ACCELKIT,
            "run",
            "--config",
            str(config),
            "--agent",
            "agent-1",
            "--slots",
            SLOTS,
            "--",
            sys.executable,
            "-c",
            "import os; print(os.environ['MOCK_CUDA_DEVICES'])",
        ],
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "cuda0"


# step -> the hooks whose post_terminate reconciliation must still run (the first hook's
# pre_create intent is written with the booking: a hook must take a post_terminate without it;
# the mock's hooks keep the base class's empty post_terminate, which is not called during the
# run and whose end goes with the release: reconciliation calls each again, to no effect)
DEAD_STEPS = {
    "booked": ("cuda",),
    "pre_create:cuda": ("cuda",),
    "pre_create:cpu": ("cpu", "cuda"),
    "prepared": ("mem", "cpu", "cuda"),
    "exited": ("mem", "cpu", "cuda"),
    "pre_terminate:cpu": ("mem", "cpu", "cuda"),
    "post_terminate:cpu": ("mem", "cpu", "cuda"),
}


@pytest.mark.parametrize("step", list(DEAD_STEPS))
def test_killed_before_the_command_runs_or_after_it_ended(node, step):
    # to get past the command, it must end: `true`; before it runs, it does not matter
    command = ["true"] if step == "exited" or "terminate" in step else ["sleep", "300"]
    process = start(node, command, pause=step)
    wait_for_pause(process, step)
    record = the_record(node)
    process.kill()
    process.wait()
    leader = ProcessStamp(record["leader"]["pid"], record["leader"]["start_time"])
    wait_gone(leader)  # the launcher sees its plan pipe close and exits; `true` has ended

    report, maps = reconcile(node)
    assert report.kept == ()
    [torn] = report.torn_down
    assert torn.workload_id == record["workload"]["id"]
    assert torn.post_terminated == DEAD_STEPS[step]
    assert all(not amounts for amounts in maps.values())
    assert no_records(node)
    later_run_works(node)
    assert leftover_groups(record["workload"]["id"]) == []  # swept by the later run


def leftover_groups(workload_id: str) -> list[Path]:
    """The killed run's cgroups that still exist (they are made before the record names them)."""
    fs = CgroupFS.read()
    name = workload_id.replace(":", "-")
    found = []
    for controller in V1_CONTROLLERS:
        own = fs.process_directory(controller)
        if own is not None and (own.path / "accelkit/agent-1" / name).exists():
            found.append(own.path / "accelkit/agent-1" / name)
    return found


@pytest.mark.parametrize("step", ["spawned", "post_create:cpu", "running"])
def test_killed_while_the_command_runs_keeps_it_until_it_ends(node, step):
    process = start(node, ["sleep", "300"], pause=step)
    wait_for_pause(process, step)
    record = the_record(node)
    process.kill()
    process.wait()
    leader = ProcessStamp(record["leader"]["pid"], record["leader"]["start_time"])
    assert leader.is_running()

    report, maps = reconcile(node)
    assert [k[1] for k in report.kept] == [record["workload"]["id"]]
    assert maps == {"cuda": {"cuda0": 1}, "cpu": {"0": 1}, "mem": {"root": 1024**3}}
    refused = subprocess.run(
        [
            *ACCELKIT,
            "run",
            "--config",
            str(node),
            "--agent",
            "agent-1",
            "--slots",
            "cuda.device=1",
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
        check=False,
    )
    assert refused.returncode == 125
    assert "cuda.device" in refused.stderr

    os.kill(leader.pid, signal.SIGKILL)
    wait_gone(leader)
    report, maps = reconcile(node)
    assert report.torn_down[0].post_terminated == ("mem", "cpu", "cuda")
    assert all(not amounts for amounts in maps.values())
    later_run_works(node)


def test_two_runs_compete_for_the_last_gpu_and_exactly_one_gets_it(node, tmp_path):
    release = tmp_path / "release"
    wait = (
        f"import pathlib, time\nwhile not pathlib.Path({str(release)!r}).exists(): time.sleep(0.02)"
    )
    runs = [
        subprocess.Popen(
            [
                *ACCELKIT,
                "run",
                "--config",
                str(node),
                "--agent",
                "agent-1",
                "--slots",
                "cuda.device=1",
                "--",
                sys.executable,
                "-c",
                wait,
            ],
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    loser = None
    while loser is None:
        for run in runs:
            if run.poll() is not None:
                loser = run
        time.sleep(0.02)
    _out, err = loser.communicate()
    assert loser.returncode == 125, err
    assert "cuda.device" in err
    release.write_text("go")
    [winner] = [r for r in runs if r is not loser]
    _out, err = winner.communicate(timeout=120)
    assert winner.returncode == 0, err
    assert no_records(node)


# The leader starts a child (or a setsid daemon) that waits for a file, then exits: the workload
# lives on in its cgroup after the leader, and after `accelkit run` is killed.
SURVIVOR = """
import os, pathlib, sys, time
out = pathlib.Path(sys.argv[1])
if sys.argv[2] == "daemon":
    os.setsid()
(out / "pid.tmp").write_text(str(os.getpid()))
os.replace(out / "pid.tmp", out / "pid")  # whole, or not there
while not (out / "go").exists():
    time.sleep(0.02)
"""

SURVIVOR_LEADER = """
import pathlib, subprocess, sys, time
out = pathlib.Path(sys.argv[1])
subprocess.Popen([sys.executable, "-c", sys.argv[2], str(out), sys.argv[3]])
while not (out / "pid").exists():
    time.sleep(0.02)
"""

GPU_ONLY = ("--slots", "cuda.device=1", "--")
LIVE_STEPS = ("spawned", "post_create:cuda", "post_create:mem", "running")


def start_survivor(config: Path, out: Path, kind: str, pause: str) -> subprocess.Popen[str]:
    out.mkdir()
    command = [sys.executable, "-c", SURVIVOR_LEADER, str(out), SURVIVOR, kind]
    return start(config, command, pause=pause)


def survivor_stamp(out: Path) -> ProcessStamp:
    deadline = time.monotonic() + 60
    while not (out / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    stamp = ProcessStamp.of(int((out / "pid").read_text()))
    assert stamp is not None
    return stamp


def gpu_refused(config: Path) -> bool:
    result = subprocess.run(
        [*ACCELKIT, "run", "--config", str(config), "--agent", "agent-1", *GPU_ONLY, "true"],
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
        check=False,
    )
    assert result.returncode in (0, 125), result.stderr
    return result.returncode == 125 and "cuda.device" in result.stderr


@pytest.mark.parametrize("kind", ["child", "daemon"])
@pytest.mark.parametrize("step", LIVE_STEPS)
def test_a_child_surviving_a_killed_run_keeps_its_device_until_it_ends(node, tmp_path, step, kind):
    out = tmp_path / "survivor"
    process = start_survivor(node, out, kind, step)
    wait_for_pause(process, step)
    child = survivor_stamp(out)
    record = the_record(node)
    process.kill()
    process.wait()
    try:
        leader = ProcessStamp(record["leader"]["pid"], record["leader"]["start_time"])
        wait_gone(leader)  # the leader has exited: only its child (or daemon) runs
        assert child.is_running()

        assert gpu_refused(node)  # liveness is the cgroup's, not the leader's
        report, maps = reconcile(node)
        assert [k[1] for k in report.kept] == [record["workload"]["id"]]
        assert maps["cuda"] == {"cuda0": 1}
    finally:
        (out / "go").write_text("1")
    wait_gone(child)
    report, maps = reconcile(node)
    assert [t.workload_id for t in report.torn_down] == [record["workload"]["id"]]
    assert all(not amounts for amounts in maps.values())
    handle = record["handle"]
    assert handle is not None
    for key, path in handle["details"].items():
        if key.startswith("cgroup."):
            assert not Path(path).exists()  # the teardown removed the workload's cgroups
    later_run_works(node)
