"""End to end with ``proctrack/cgroup``: a job's process that left its environment behind is
still found in the job's cgroup and killed by the epilog before the devices are freed."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import cluster as slurm_cluster
import pytest
from cluster import Cluster
from conftest import unavailable
from test_slurm_guards import _alive, _stepd
from test_slurm_jobs import wait_released


@pytest.fixture(scope="module")
def cgroup_cluster() -> Iterator[Cluster]:
    reason = slurm_cluster.missing()
    if reason is not None:
        unavailable(reason)
    if not Path("/sys/fs/cgroup/freezer").is_dir():  # the host's, not a package CI installs
        pytest.skip("this test runs proctrack/cgroup on the cgroup v1 freezer; the host has none")
    root = Path(tempfile.mkdtemp(prefix="accelkit-slurm-cgroup-"))
    root.chmod(0o755)
    try:
        started = slurm_cluster.start(root, proctrack="cgroup")
    except (OSError, RuntimeError) as exc:
        unavailable(f"Slurm with proctrack/cgroup cannot start here: {exc}")
        raise
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_a_process_without_the_jobs_environment_is_killed_from_its_cgroup(
    cgroup_cluster: Cluster,
) -> None:
    slurm = cgroup_cluster
    pidfile = slurm.root / "leftover.pid"
    script = f"env -i sleep 300 & echo $! > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; wait"
    done = slurm.run("sbatch", "--gres=gpu:1", "-o", "/dev/null", "--wrap", script)
    assert done.returncode == 0, done.stderr
    job = done.stdout.split()[-1]
    deadline = time.monotonic() + 60
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    leftover = int(pidfile.read_text())
    assert b"SLURM_JOB_ID" not in Path(f"/proc/{leftover}/environ").read_bytes()
    assert f"/job_{job}/" in Path(f"/proc/{leftover}/cgroup").read_text()
    os.kill(_stepd(job), signal.SIGKILL)
    try:
        assert slurm.run("scancel", job).returncode == 0
        wait_released(slurm, job, timeout=60)
        assert not _alive(leftover), "the job's process outlived its booking"
    finally:
        if _alive(leftover):
            os.kill(leftover, signal.SIGKILL)
