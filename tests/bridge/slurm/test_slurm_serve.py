"""End to end: ``accelkit serve`` answers the prologs of a real slurmd (no Python start per
job), and the prolog script books the job itself where no serve answers."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import cluster as slurm_cluster
import pytest
from cluster import NODE, Cluster
from conftest import unavailable
from test_slurm_guards import node_reason, resume
from test_slurm_jobs import slurm_workloads, wait_released
from test_slurm_tasks import mock_of, srun


@pytest.fixture(scope="module")
def served() -> Iterator[Cluster]:
    reason = slurm_cluster.missing()
    if reason is None and shutil.which("curl") is None:
        reason = "curl missing (apt-get install curl): the prolog script asks serve with it"
    if reason is not None:
        unavailable(reason)
    root = Path(tempfile.mkdtemp(prefix="accelkit-slurm-serve-"))
    root.chmod(0o755)
    try:
        started = slurm_cluster.start(root, serve=True)
    except (OSError, RuntimeError) as exc:
        unavailable(f"Slurm cannot start here: {exc}")
        raise
    script = root / "prolog-script.sh"
    text = script.read_text()
    # while serve runs, the script must not book a job itself: a job it did not book fails
    script.write_text(text.replace("exec ", "echo 'error: serve did not answer' >&2; exit 2 #"))
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_serve_books_the_jobs_and_each_task_gets_its_own_gpu(served: Cluster) -> None:
    found = srun(served, "-n2", "-O", "--gpus-per-task=1")
    assert len({t["gpus"] for t in found}) == 2
    for task in found:
        assert task["mock"] == mock_of(task["gpus"])
    wait_released(served, found[0]["job"])
    log = (served.root / "log" / "serve.log").read_text()
    assert "answering Slurm prologs on" in log


def test_a_refusal_by_serve_is_the_prologs_error_line(served: Cluster) -> None:
    assert served.accelkit("cordon", "cuda", "cuda2", "--reason", "xid 79").returncode == 0
    try:
        done = served.run("srun", "--gres=gpu:4", "true", timeout=60)
        assert done.returncode != 0
        lines = [
            line
            for line in served.log("slurmd.log").splitlines()
            if "cuda/cuda2 unhealthy (cordoned: xid 79)" in line
        ]
        assert lines
        assert "prolog failed: rc:2 output:error: job " in lines[-1]
        assert node_reason(served)[1] == "accelkit: cuda/cuda2 unhealthy (cordoned: xid 79)"
        assert slurm_workloads(served) == {}
    finally:
        served.accelkit("uncordon", "cuda", "cuda2")
        resume(served)
    assert "DRAIN" not in node_reason(served)[0]


def test_without_serve_the_script_books_the_job_itself(served: Cluster) -> None:
    script = served.root / "prolog-script.sh"
    script.write_text(
        script.read_text().replace("echo 'error: serve did not answer' >&2; exit 2 #", "exec ")
    )
    pid = served.pids.pop("serve")
    os.kill(pid, signal.SIGKILL)  # its socket file stays, with nothing behind it
    os.waitpid(pid, 0)
    assert (served.root / "state" / "slurm" / "prolog.sock").is_socket()
    found = srun(served, "--gres=gpu:2")
    assert found[0]["mock"] == mock_of(found[0]["gpus"])
    assert len(found[0]["mock"].split(",")) == 2
    wait_released(served, found[0]["job"])
    assert NODE in served.run("sinfo", "-h", "-N", "-o", "%N").stdout
