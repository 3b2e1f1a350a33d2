"""End to end on a real slurmd: a cordoned or unhealthy device fails the prolog and drains the
node (lifted by ``accelkit serve`` only for accelkit's own drain), a killed slurmstepd leaves
no process behind, and a job is known by its SLUID or its start time."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cluster import ACCELKIT, NODE, Cluster
from test_slurm_jobs import slurm_workloads, wait_released


def node_reason(slurm: Cluster) -> tuple[str, str]:
    text = slurm.run("scontrol", "show", "node", "-o", NODE).stdout
    state = text.split("State=", 1)[1].split()[0]
    reason = text.split("Reason=", 1)[1].rsplit(" [", 1)[0].strip() if "Reason=" in text else ""
    return state, reason


def resume(slurm: Cluster) -> None:
    slurm.run("scontrol", "update", f"nodename={NODE}", "state=resume")
    deadline = time.monotonic() + 30
    while "DRAIN" in node_reason(slurm)[0] and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.fixture
def cordoned(slurm: Cluster) -> Iterator[Callable[[str], None]]:
    done: list[str] = []

    def cordon(device: str) -> None:
        out = slurm.accelkit("cordon", "cuda", device, "--reason", "fan failing")
        assert out.returncode == 0, out.stderr
        done.append(device)

    try:
        yield cordon
    finally:
        for device in done:
            slurm.accelkit("uncordon", "cuda", device)
        resume(slurm)


class Serve:
    """``accelkit serve`` with ``[bridge.slurm] resume = true``; its stderr lines, read as they
    come."""

    def __init__(self, slurm: Cluster, tmp_path: Path) -> None:
        config = tmp_path / "resume.toml"
        config.write_text(slurm.config.read_text() + "resume = true\n")
        self.proc = subprocess.Popen(
            [ACCELKIT, "serve", "--config", str(config), "--listen", "127.0.0.1:0",
             "--rediscover-interval", "0.2"],
            env=slurm.env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.said: list[str] = []

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                continue
            self.said.append(line)
            if text in line:
                return line
        pytest.fail(f"serve never said {text!r}: {''.join(self.said)}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def test_a_cordoned_gpu_fails_the_prolog_drains_the_node_and_serve_lifts_it(
    slurm: Cluster, cordoned: Callable[[str], None], tmp_path: Path
) -> None:
    cordoned("cuda0")
    done = slurm.run("srun", "--gres=gpu:4", "true", timeout=60)
    assert done.returncode != 0
    state, reason = node_reason(slurm)
    assert "DRAIN" in state
    assert reason == "accelkit: cuda/cuda0 unhealthy (cordoned: fan failing)"
    assert (
        "cuda/cuda0 unhealthy (cordoned: fan failing): node accelkit-test drained; nothing booked"
        in (slurm.log("slurmd.log"))
    )
    assert slurm_workloads(slurm) == {}
    serve = Serve(slurm, tmp_path)
    try:
        serve.wait_for("serving http")  # its first look at the drain is done: still cordoned
        assert "DRAIN" in node_reason(slurm)[0]
        assert slurm.accelkit("uncordon", "cuda", "cuda0").returncode == 0
        line = serve.wait_for("resumed")
        assert f"node {NODE} resumed: cuda/cuda0 take work again" in line
    finally:
        serve.stop()
    assert "DRAIN" not in node_reason(slurm)[0]
    # a node just resumed may still be settling in the controller: the job then queues and
    # starts at the scheduler's next pass (up to a minute), which this waits for
    command = ("srun", "--gres=gpu:4", "sh", "-c", "echo $MOCK_CUDA_DEVICES")
    env = slurm.run(*command, timeout=180)
    assert env.stdout.strip() == "cuda0,cuda1,cuda2,cuda3"


def test_a_drain_someone_else_set_is_never_lifted(
    slurm: Cluster, cordoned: Callable[[str], None], tmp_path: Path
) -> None:
    cordoned("cuda1")
    assert slurm.run("srun", "--gres=gpu:4", "true", timeout=60).returncode != 0
    assert node_reason(slurm)[1].startswith("accelkit: cuda/cuda1")
    admin = "memory test by the admin"
    slurm.run("scontrol", "update", f"nodename={NODE}", "state=drain", f"reason={admin}")
    assert slurm.accelkit("uncordon", "cuda", "cuda1").returncode == 0
    serve = Serve(slurm, tmp_path)
    try:
        line = serve.wait_for("left alone")
        assert f"node {NODE}: the drain accelkit set is gone or changed" in line
        serve.wait_for("serving http")
    finally:
        serve.stop()
    assert node_reason(slurm) == (node_reason(slurm)[0], admin)
    assert "DRAIN" in node_reason(slurm)[0]
    assert "resumed" not in "".join(serve.said)


def test_an_unhealthy_gpu_fails_the_prolog_naming_it(slurm: Cluster, tmp_path: Path) -> None:
    config = tmp_path / "unhealthy.toml"
    config.write_text(
        slurm.config.read_text().replace(
            'id = "cuda3"\n', 'id = "cuda3"\nhealth = "unhealthy"\nhealth-reason = "XID 79"\n'
        )
    )
    env = {**slurm.env, "SLURM_JOB_ID": "424242", "SLURM_JOB_GPUS": "2,3"}
    done = subprocess.run(
        [ACCELKIT, "slurm", "prolog", "--config", str(config)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        "error: job 424242 was allocated cuda/cuda3 unhealthy (XID 79): the node is not drained "
        "by accelkit (no SLURMD_NODENAME); nothing booked\n"
    )
    assert slurm_workloads(slurm) == {}


def _stepd(job: str) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.startswith(b"slurmstepd") and f"[{job}.batch]".encode() in cmdline:
                return int(entry.name)
    pytest.fail(f"no slurmstepd of job {job}")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_killed_slurmstepd_leaves_no_process_holding_the_devices(slurm: Cluster) -> None:
    pidfile = slurm.root / "leftover.pid"
    pidfile.unlink(missing_ok=True)
    done = slurm.run(
        "sbatch", "--gres=gpu:1", "-o", "/dev/null",
        "--wrap", f"sleep 300 & echo $! > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; wait",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = done.stdout.split()[-1]
    deadline = time.monotonic() + 60
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    leftover = int(pidfile.read_text())
    os.kill(_stepd(job), signal.SIGKILL)  # proctrack/linuxproc loses track of the job
    try:
        assert slurm.run("scancel", job).returncode == 0
        wait_released(slurm, job, timeout=60)  # the epilog freed it (or a reconciliation)
        assert not _alive(leftover), "the job's process outlived its booking"
    finally:
        if _alive(leftover):
            os.kill(leftover, signal.SIGKILL)


def _job_without_gres(slurm: Cluster) -> tuple[subprocess.Popen[str], str]:
    job = subprocess.Popen(
        ["srun", "sh", "-c", "echo $SLURM_JOB_ID; sleep 60"],
        env=slurm.env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert job.stdout is not None
    return job, job.stdout.readline().strip()


def hook(slurm: Cluster, name: str, env: dict[str, str], config: Path | None = None) -> str:
    done = subprocess.run(
        [ACCELKIT, "slurm", name, "--config", str(config or slurm.config)],
        env={**slurm.env, **env}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_job_with_a_sluid_is_booked_by_it_and_a_retry_is_recognised(slurm: Cluster) -> None:
    job, job_id = _job_without_gres(slurm)
    try:
        env = {"SLURM_JOB_ID": job_id, "SLURM_JOB_SLUID": "s1ab2cd3ef", "SLURM_JOB_GPUS": "2"}
        hook(slurm, "prolog", env)
        hook(slurm, "prolog", env)  # slurmd retrying: the same job, nothing to do
        booked = slurm_workloads(slurm)
        assert set(booked) == {"slurm:s1ab2cd3ef"}
        assert booked["slurm:s1ab2cd3ef"]["devices"] == {"cuda": ["cuda2"]}
        assert hook(slurm, "task-prolog", env) == "export MOCK_CUDA_DEVICES=cuda2\n"
        hook(slurm, "epilog", env)
        assert slurm_workloads(slurm) == {}
    finally:
        job.kill()
        job.wait()
        slurm.run("scancel", job_id)


def test_a_booking_of_an_earlier_job_with_the_same_id_is_not_adopted(
    slurm: Cluster, tmp_path: Path
) -> None:
    job, job_id = _job_without_gres(slurm)
    try:
        # the booking of an earlier job that had this id: Slurm said another StartTime
        earlier, then = tmp_path / "scontrol", tmp_path / "then"
        then.touch()  # while it exists, the booked job is the earlier one
        earlier.write_text(
            f'#!/bin/sh\n[ -e {then} ] || exec scontrol "$@"\n'
            "scontrol \"$@\" | sed 's/StartTime=[^ ]*/StartTime=2001-01-01T00:00:00/'\n"
        )
        earlier.chmod(0o755)
        old = tmp_path / "old.toml"
        old.write_text(slurm.config.read_text() + f'scontrol = "{earlier}"\n')
        env = {"SLURM_JOB_ID": job_id, "SLURM_JOB_GPUS": "1"}
        hook(slurm, "prolog", env, old)
        then.unlink()
        # the job running now under that id: the stale booking is freed, the job booked anew
        hook(slurm, "prolog", env)
        done = slurm.accelkit("status", "--json")
        [record] = [w for w in json.loads(done.stdout) if w["workload"] == f"slurm:{job_id}"]
        assert record["devices"] == {"cuda": ["cuda1"]}
        ledger = slurm.run("scontrol", "show", "job", "-o", job_id).stdout
        start = ledger.split("StartTime=", 1)[1].split()[0]
        assert start != "2001-01-01T00:00:00"
        hook(slurm, "epilog", env)
        assert slurm_workloads(slurm) == {}
    finally:
        job.kill()
        job.wait()
        slurm.run("scancel", job_id)
