"""A Slurm job's processes left on the node: found by environment, open device node or cgroup,
killed by the epilog; while one holds the job's devices, the booking counts as running."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelkit.runtime.slurm_jobs import (
    SlurmJobsRuntime,
    job_processes,
    kill_processes,
    slurm_handle,
)

HOLD = "import sys, time; f = open(sys.argv[1]); print('ready', flush=True); time.sleep(300)"


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def start(
    procs: list[subprocess.Popen[str]], argv: list[str], env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    proc = subprocess.Popen(argv, env={**base, **(env or {})}, stdout=subprocess.PIPE, text=True)
    procs.append(proc)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


#: says ready once it runs as what it stays: a process that execs after saying so may still be
#: in the exec when it is looked for, and its environment cannot be read then
SLEEPER = "import time; print('ready', flush=True); time.sleep(300)"


def ready_sleeper(procs: list[subprocess.Popen[str]], env: dict[str, str]) -> int:
    return start(procs, [sys.executable, "-S", "-c", SLEEPER], env).pid


def test_a_process_whose_environment_names_the_job_is_the_jobs(
    started: list[subprocess.Popen[str]],
) -> None:
    pid = ready_sleeper(started, {"SLURM_JOB_ID": "987001"})
    assert pid in job_processes("987001")
    assert pid not in job_processes("987002")
    assert pid not in job_processes("98700")  # not a prefix match
    assert pid not in job_processes("987001", by_environment=False)


def test_another_clusters_job_of_that_id_and_the_jobs_hooks_are_not_the_jobs(
    started: list[subprocess.Popen[str]],
) -> None:
    mine = {"SLURM_JOB_ID": "987007", "SLURM_CONF": "/etc/slurm/a.conf"}
    pid = ready_sleeper(started, mine)
    other = ready_sleeper(started, {**mine, "SLURM_CONF": "/etc/slurm/b.conf"})
    hook = ready_sleeper(started, {**mine, "SLURM_SCRIPT_CONTEXT": "epilog_slurmd"})
    task = ready_sleeper(started, {**mine, "SLURM_SCRIPT_CONTEXT": "prolog_task"})
    found = job_processes("987007", same={"SLURM_CONF": "/etc/slurm/a.conf"})
    assert pid in found
    assert task in found  # a task keeps the context of its task prolog
    assert other not in found
    assert hook not in found
    bare = ready_sleeper(started, {"SLURM_JOB_ID": "987007"})  # says nothing of its cluster
    assert bare in job_processes("987007", same={"SLURM_CONF": "/etc/slurm/a.conf"})


def test_a_process_holding_a_device_node_is_the_jobs(
    started: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    node = tmp_path / "gpu0"
    node.touch()
    pid = start(started, [sys.executable, "-c", HOLD, str(node)]).pid
    assert job_processes("987004", [str(node)], by_environment=False) == [pid]
    assert job_processes("987004", [str(tmp_path / "gpu1")], by_environment=False) == []


def test_a_process_in_the_jobs_cgroup_is_the_jobs(
    started: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    pid = ready_sleeper(started, {})
    step = tmp_path / "freezer" / "slurm" / "uid_0" / "job_55" / "step_0"
    step.mkdir(parents=True)
    (step / "cgroup.procs").write_text(f"{pid}\n")
    assert job_processes("55", cgroup_root=tmp_path) == [pid]
    assert job_processes("56", cgroup_root=tmp_path) == []
    assert job_processes("55", cgroup_root=tmp_path, by_cgroup=False) == []


def test_the_epilog_itself_is_never_among_them() -> None:
    code = "from accelkit.runtime.slurm_jobs import job_processes; print(job_processes('987003'))"
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "SLURM_JOB_ID": "987003"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "[]"


def test_kill_processes_waits_until_they_are_gone(started: list[subprocess.Popen[str]]) -> None:
    pid = ready_sleeper(started, {"SLURM_JOB_ID": "987005"})
    # not reaped until the fixture waits for it: a zombie counts as gone
    assert kill_processes(job_processes("987005"), timeout=30) == []
    assert job_processes("987005") == []
    assert kill_processes([pid], timeout=1) == []  # gone already: nothing left


def fake_scontrol(tmp_path: Path, output: str, code: int) -> str:
    path = tmp_path / "scontrol"
    path.write_text(f"#!/bin/sh\necho '{output}'\nexit {code}\n")
    path.chmod(0o755)
    return str(path)


def test_a_job_over_whose_process_holds_its_device_stays_booked(
    started: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    node = tmp_path / "gpu0"
    node.touch()
    scontrol = fake_scontrol(tmp_path, "slurm_load_jobs error: Invalid job id specified", 1)
    handle = slurm_handle("987006", scontrol, None, files=[str(node)])
    runtime = SlurmJobsRuntime()
    assert asyncio.run(runtime.is_alive(handle)) is False
    proc = start(started, [sys.executable, "-c", HOLD, str(node)])
    assert asyncio.run(runtime.is_alive(handle)) is True
    proc.kill()
    proc.wait()
    assert asyncio.run(runtime.is_alive(handle)) is False


@pytest.mark.parametrize(
    ("recorded", "running", "alive"),
    [
        ({"start": "2026-01-01T00:00:00"}, "StartTime=2026-01-01T00:00:00", True),
        ({"start": "2026-01-01T00:00:00"}, "StartTime=2026-02-02T00:00:00", False),
        ({"sluid": "s1"}, "SLUID=s1 StartTime=2026-02-02T00:00:00", True),
        ({"sluid": "s1"}, "SLUID=s2 StartTime=2026-02-02T00:00:00", False),
        ({}, "StartTime=2026-02-02T00:00:00", True),
    ],
)
def test_a_job_id_used_again_is_another_job(
    tmp_path: Path, recorded: dict[str, str], running: str, alive: bool
) -> None:
    scontrol = fake_scontrol(tmp_path, f"JobId=9 JobState=RUNNING {running}", 0)
    handle = slurm_handle("9", scontrol, None, **recorded)
    assert asyncio.run(SlurmJobsRuntime().is_alive(handle)) is alive
