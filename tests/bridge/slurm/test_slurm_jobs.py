"""End to end: accelkit's prolog, task prolog and epilog around jobs of a real slurmd."""

from __future__ import annotations

import json
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from cluster import ACCELKIT, Cluster

ENV_OF_JOB = "echo JOB=$SLURM_JOB_ID; echo GPUS=$SLURM_STEP_GPUS; env | grep '^MOCK_' || true"


def job_env(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def status(slurm: Cluster) -> list[dict[str, object]]:
    done = slurm.accelkit("status", "--json")
    assert done.returncode == 0, done.stderr
    workloads: list[dict[str, object]] = json.loads(done.stdout)
    return workloads


def slurm_workloads(slurm: Cluster) -> dict[str, dict[str, object]]:
    return {str(w["workload"]): w for w in status(slurm) if str(w["workload"]).startswith("slurm:")}


def wait_released(slurm: Cluster, job: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if f"slurm:{job}" not in slurm_workloads(slurm):
            return
        time.sleep(0.2)
    pytest.fail(f"job {job} still booked after {timeout} s: {slurm.log('slurmd.log')}")


@pytest.mark.parametrize("count", [1, 2])
def test_job_sees_exactly_the_gpus_slurm_allocated(slurm: Cluster, count: int) -> None:
    env = job_env(slurm.run("srun", f"--gres=gpu:{count}", "sh", "-c", ENV_OF_JOB))
    indices = [int(i) for i in env["GPUS"].split(",")]
    assert len(indices) == count
    assert env["MOCK_CUDA_DEVICES"] == ",".join(f"cuda{i}" for i in indices)
    assert "MOCK_TPU_DEVICES" not in env
    wait_released(slurm, env["JOB"])


def test_other_gres_names_are_read_from_scontrol(slurm: Cluster) -> None:
    env = job_env(slurm.run("srun", "--gres=tpu:2", "sh", "-c", ENV_OF_JOB))
    assert env["MOCK_TPU_DEVICES"] == "tpu0,tpu1"
    assert "MOCK_CUDA_DEVICES" not in env
    wait_released(slurm, env["JOB"])


def test_a_job_without_accelkit_gres_passes_through(slurm: Cluster) -> None:
    env = job_env(slurm.run("srun", "sh", "-c", ENV_OF_JOB))
    assert not any(key.startswith("MOCK_") for key in env)
    assert f"slurm:{env['JOB']}" not in slurm_workloads(slurm)


def test_status_shows_the_booking_while_the_job_runs_and_the_epilog_frees_it(
    slurm: Cluster,
) -> None:
    marker = slurm.root / "running"
    marker.unlink(missing_ok=True)
    script = f"{ENV_OF_JOB}; touch {marker}; sleep 3"
    job = subprocess.Popen(
        ["srun", "--gres=gpu:1", "sh", "-c", script],
        env=slurm.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), "the job did not start"
        booked = [w for w in slurm_workloads(slurm).values() if w["runtime"] == "slurm-jobs"]
        assert len(booked) == 1, booked
        assert booked[0]["liveness"] == "running"
        out, err = job.communicate(timeout=30)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    env = job_env(subprocess.CompletedProcess(job.args, job.returncode, out, err))
    assert booked[0]["workload"] == f"slurm:{env['JOB']}"
    assert booked[0]["devices"] == {"cuda": [env["MOCK_CUDA_DEVICES"]]}
    wait_released(slurm, env["JOB"])


def test_concurrent_jobs_never_share_a_device(slurm: Cluster) -> None:
    def one(_i: int) -> dict[str, str]:
        script = f"{ENV_OF_JOB}; sleep 1"
        return job_env(slurm.run("srun", "--gres=gpu:2", "sh", "-c", script, timeout=60))

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(one, range(2))
    a = set(first["MOCK_CUDA_DEVICES"].split(","))
    b = set(second["MOCK_CUDA_DEVICES"].split(","))
    assert len(a) == len(b) == 2
    assert not a & b
    for env in (first, second):
        wait_released(slurm, env["JOB"])


def test_epilog_twice_and_prolog_without_a_job(slurm: Cluster) -> None:
    env = {**slurm.env, "SLURM_JOB_ID": "999999"}
    for _ in range(2):
        done = subprocess.run(
            [ACCELKIT, "slurm", "epilog", "--config", str(slurm.config)],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    bare = {k: v for k, v in slurm.env.items() if not k.startswith("SLURM_JOB")}
    done = subprocess.run(
        [ACCELKIT, "slurm", "prolog", "--config", str(slurm.config)],
        env=bare, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert re.match(r"error: SLURM_JOB_ID is '', not a job id", done.stderr)
    assert "Traceback" not in done.stderr


def test_the_runtime_asks_slurm_whether_a_job_runs(slurm: Cluster) -> None:
    import asyncio

    from accelkit.runtime.slurm_jobs import SlurmJobsRuntime, slurm_handle

    conf = slurm.env["SLURM_CONF"]
    job = subprocess.Popen(
        ["srun", "sh", "-c", "echo JOB=$SLURM_JOB_ID; sleep 30"],
        env=slurm.env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert job.stdout is not None
        job_id = job.stdout.readline().strip().removeprefix("JOB=")
        runtime = SlurmJobsRuntime()
        handle = slurm_handle(job_id, "scontrol", conf)
        assert asyncio.run(runtime.is_alive(handle)) is True
        assert asyncio.run(SlurmJobsRuntime(frozenset({job_id})).is_alive(handle)) is False
        assert asyncio.run(runtime.is_alive(slurm_handle("987654", "scontrol", conf))) is False
        lost = slurm_handle(job_id, str(slurm.root / "absent" / "scontrol"), conf)
        assert asyncio.run(runtime.is_alive(lost)) is None
        asyncio.run(runtime.stop(handle, 1.0))  # scancel
        job.wait(timeout=30)
        deadline = time.monotonic() + 20
        while asyncio.run(runtime.is_alive(handle)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert asyncio.run(runtime.is_alive(handle)) is False
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


def test_a_job_gone_without_its_epilog_is_freed_by_any_accelkit_process(slurm: Cluster) -> None:
    ended = job_env(slurm.run("srun", "sh", "-c", ENV_OF_JOB))["JOB"]
    slurm.wait_job_over(ended)  # its own epilog has run (it would free what is booked below)
    env = {**slurm.env, "SLURM_JOB_ID": ended, "SLURM_JOB_GPUS": "3"}
    prolog = subprocess.run(
        [ACCELKIT, "slurm", "prolog", "--config", str(slurm.config)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert prolog.returncode == 0, prolog.stderr
    task = subprocess.run(
        [ACCELKIT, "slurm", "task-prolog", "--config", str(slurm.config)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert task.stdout == "export MOCK_CUDA_DEVICES=cuda3\n"
    kept = slurm.root / "state" / "slurm" / f"{ended}.env"
    assert kept.is_file()
    # no epilog ran (slurmd lost, say): Slurm calls the job COMPLETED, so the next accelkit
    # process that reconciles finishes its teardown and frees cuda3
    done = slurm.accelkit("status", "--json")
    assert done.returncode == 0, done.stderr
    assert f"slurm:{ended}" not in {w["workload"] for w in json.loads(done.stdout)}
    again = job_env(slurm.run("srun", "--gres=gpu:4", "sh", "-c", ENV_OF_JOB))
    assert again["MOCK_CUDA_DEVICES"] == "cuda0,cuda1,cuda2,cuda3"
    wait_released(slurm, again["JOB"])
    # the environment kept for the freed job went with the next job's prolog
    assert not kept.exists()


def test_a_prolog_run_again_for_its_job_does_nothing_and_other_devices_are_refused(
    slurm: Cluster,
) -> None:
    job = subprocess.Popen(
        ["srun", "sh", "-c", "echo $SLURM_JOB_ID; sleep 30"],
        env=slurm.env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert job.stdout is not None
        job_id = job.stdout.readline().strip()

        def hook(name: str, gpus: str) -> subprocess.CompletedProcess[str]:
            env = {**slurm.env, "SLURM_JOB_ID": job_id, "SLURM_JOB_GPUS": gpus}
            return subprocess.run(
                [ACCELKIT, "slurm", name, "--config", str(slurm.config)],
                env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip

        assert hook("prolog", "1").returncode == 0
        again = hook("prolog", "1")
        assert again.returncode == 0, again.stderr
        assert hook("task-prolog", "1").stdout == "export MOCK_CUDA_DEVICES=cuda1\n"
        assert list(slurm_workloads(slurm)[f"slurm:{job_id}"]["devices"].values()) == [["cuda1"]]
        other = hook("prolog", "2")
        assert other.returncode == 2
        assert other.stderr.startswith(
            f"error: job {job_id} is booked already (devices cuda:cuda1)"
        )
        assert "Traceback" not in other.stderr
        assert hook("epilog", "1").returncode == 0
        assert f"slurm:{job_id}" not in slurm_workloads(slurm)
    finally:
        job.kill()
        job.wait()


def test_a_device_another_job_holds_fails_the_prolog_and_books_nothing(slurm: Cluster) -> None:
    argv = ["srun", "sh", "-c", "echo $SLURM_JOB_ID; sleep 30"]
    jobs = [
        subprocess.Popen(argv, env=slurm.env, stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    try:
        first, second = (j.stdout.readline().strip() for j in jobs if j.stdout is not None)

        def hook(name: str, job: str) -> subprocess.CompletedProcess[str]:
            env = {**slurm.env, "SLURM_JOB_ID": job, "SLURM_JOB_GPUS": "0"}
            return subprocess.run(
                [ACCELKIT, "slurm", name, "--config", str(slurm.config)],
                env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip

        assert hook("prolog", first).returncode == 0
        refused = hook("prolog", second)
        assert refused.returncode == 2
        assert refused.stderr.startswith("error: ")
        assert "cuda0" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert hook("task-prolog", second).stdout == ""
        assert set(slurm_workloads(slurm)) == {f"slurm:{first}"}
        assert hook("epilog", first).returncode == 0
        assert slurm_workloads(slurm) == {}
    finally:
        for job in jobs:
            job.kill()
            job.wait()
        slurm.run("scancel", "--user=root")
