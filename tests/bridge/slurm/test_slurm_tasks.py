"""End to end on a real slurmd: every task and step sees the devices Slurm bound to it, no
more (``--gpus-per-task``, steps with their own ``--gres`` in a batch job, no GRES at all)."""

from __future__ import annotations

import random
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cluster import Cluster
from test_slurm_jobs import slurm_workloads, wait_released

#: one line per task: job, step, rank, Slurm's binding, accelkit's variables, start and end
TASK = (
    'echo "TASK $SLURM_JOB_ID ${SLURM_STEP_ID:-batch} $SLURM_PROCID '
    "gpus=${SLURM_STEP_GPUS:--} mock=${MOCK_CUDA_DEVICES:--} tpu=${MOCK_TPU_DEVICES:--} "
    'start=$(date +%s%N)"; sleep 0.2; echo "END $SLURM_JOB_ID ${SLURM_STEP_ID:-batch} '
    '$SLURM_PROCID $(date +%s%N)"'
)


def tasks(text: str) -> list[dict[str, str]]:
    """The TASK lines of a job's output, with their END time."""
    ends = {
        tuple(line.split()[1:4]): line.split()[4]
        for line in text.splitlines()
        if line.startswith("END ")
    }
    found = []
    for line in text.splitlines():
        if not line.startswith("TASK "):
            continue
        words = line.split()
        row = dict(w.split("=", 1) for w in words[4:])
        row.update(job=words[1], step=words[2], rank=words[3])
        row["end"] = ends.get((words[1], words[2], words[3]), row["start"])
        found.append(row)
    return found


def mock_of(gpus: str) -> str:
    return "-" if gpus == "-" else ",".join(f"cuda{i}" for i in gpus.split(","))


def srun(slurm: Cluster, *args: str) -> list[dict[str, str]]:
    done = slurm.run("srun", *args, "sh", "-c", TASK, timeout=120)
    assert done.returncode == 0, done.stderr
    return tasks(done.stdout)


def sbatch(slurm: Cluster, script: str, *args: str) -> list[dict[str, str]]:
    out = slurm.root / f"batch-{random.getrandbits(32)}.out"
    path = out.with_suffix(".sh")
    path.write_text(f"#!/bin/sh\nTASK='{TASK}'\n{script}")
    done = slurm.run("sbatch", "--wait", "-o", str(out), *args, str(path), timeout=180)
    assert done.returncode == 0, f"{done.stderr}\n{out.read_text() if out.exists() else ''}"
    return tasks(out.read_text())


def test_each_task_of_gpus_per_task_gets_its_own_gpu(slurm: Cluster) -> None:
    found = srun(slurm, "-n2", "-O", "--gpus-per-task=1")
    assert len(found) == 2
    for task in found:
        assert task["gpus"] != "-"
        assert task["mock"] == mock_of(task["gpus"])  # not the job's two
    assert len({t["gpus"] for t in found}) == 2  # one GPU each, not the same
    wait_released(slurm, found[0]["job"])


STEPS = """sh -c "$TASK"
srun -n1 --gres=none sh -c "$TASK"
srun -n3 -O --gpus-per-task=1 sh -c "$TASK"
srun -n1 --gres=gpu:1 sh -c "$TASK"
srun -n1 --gres=tpu:2 sh -c "$TASK"
srun -n1 sh -c "$TASK"
"""


def test_steps_of_a_batch_job_get_their_own_gres(slurm: Cluster) -> None:
    found = sbatch(slurm, STEPS, "-n1", "-O", "--gres=gpu:3,tpu:2")
    by_step: dict[str, list[dict[str, str]]] = {}
    for task in found:
        by_step.setdefault(task["step"], []).append(task)
    batch = by_step["batch"][0]
    job_gpus = batch["mock"].split(",")
    assert len(job_gpus) == 3
    assert batch["tpu"] == "tpu0,tpu1"
    assert (by_step["0"][0]["mock"], by_step["0"][0]["tpu"]) == ("-", "-")  # --gres=none
    ranks = by_step["1"]  # -n3 --gpus-per-task=1
    assert len(ranks) == 3
    assert sorted(t["mock"] for t in ranks) == sorted(job_gpus)
    for task in [*ranks, *by_step["2"]]:
        assert task["mock"] == mock_of(task["gpus"])
        assert task["tpu"] == "-"
    assert len(by_step["2"][0]["mock"].split(",")) == 1
    assert (by_step["3"][0]["mock"], by_step["3"][0]["tpu"]) == ("-", "tpu0,tpu1")
    assert (by_step["4"][0]["mock"], by_step["4"][0]["tpu"]) == (batch["mock"], "tpu0,tpu1")
    wait_released(slurm, batch["job"])


def _random_job(slurm: Cluster, rng: random.Random) -> list[dict[str, str]]:
    form = rng.choice(["whole", "per-task", "none", "count", "batch"])
    if form == "whole":
        return srun(slurm, "--gres=gpu:4")
    if form == "per-task":
        return srun(slurm, f"-n{rng.randint(1, 3)}", "-O", "--gpus-per-task=1")
    if form == "none":
        return srun(slurm)
    if form == "count":
        return srun(slurm, f"--gres=gpu:{rng.randint(1, 3)}")
    return sbatch(slurm, STEPS, "-n1", "-O", f"--gres=gpu:{rng.randint(3, 4)}")


def check(found: list[dict[str, str]]) -> None:
    """Every task saw Slurm's binding, and no two jobs used a device at the same time."""
    for task in found:
        if task["step"] != "batch":
            assert task["mock"] == mock_of(task["gpus"]), task
    used = [
        (t["job"], set(t["mock"].split(",")), int(t["start"]), int(t["end"]))
        for t in found
        if t["mock"] != "-"
    ]
    shared = [
        (a[0], b[0], a[1] & b[1])
        for i, a in enumerate(used)
        for b in used[i + 1 :]
        if a[0] != b[0] and a[1] & b[1] and a[2] <= b[3] and b[2] <= a[3]
    ]
    assert shared == []


@pytest.mark.timeout(900)
def test_random_jobs_and_a_task_array_see_exactly_slurms_binding(slurm: Cluster) -> None:
    rng = random.Random(27)
    began = time.monotonic()
    with ThreadPoolExecutor(3) as pool:
        jobs = list(pool.map(lambda _: _random_job(slurm, rng), range(30)))
    print(f"30 jobs: {time.monotonic() - began:.1f} s")
    array = """case $((SLURM_ARRAY_TASK_ID % 3)) in
0) srun -n1 sh -c "$TASK";;
1) srun -n2 -O --gpus-per-task=1 sh -c "$TASK";;
2) srun -n1 --gres=none sh -c "$TASK";;
esac
"""
    out = slurm.root / "array"
    out.mkdir(exist_ok=True)
    script = out / "array.sh"
    script.write_text(f"#!/bin/sh\nTASK='{TASK}'\n{array}")
    done = slurm.run(
        "sbatch", "--wait", "--array=0-19", "-n1", "-O", "--gres=gpu:2",
        "-o", str(out / "%A_%a.out"), str(script), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    print(f"and the array: {time.monotonic() - began:.1f} s")
    arrays = [tasks(p.read_text()) for p in sorted(out.glob("*.out"))]
    assert len(arrays) == 20
    found = [t for job in [*jobs, *arrays] for t in job]
    assert len({t["job"] for t in found}) == 50
    check(found)
    deadline = time.monotonic() + 60  # the last epilogs may still run
    while slurm_workloads(slurm) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert slurm_workloads(slurm) == {}
    assert not list((slurm.root / "state" / "slurm").glob("*.env"))


def test_the_task_prolog_starts_no_python(slurm: Cluster) -> None:
    text = Path(slurm.root / "task-prolog.sh").read_text()
    assert text.startswith("#!/bin/sh\n")
    assert "python" not in text.lower()
    done = subprocess.run(["sh", "-n", str(slurm.root / "task-prolog.sh")], check=False)
    assert done.returncode == 0
