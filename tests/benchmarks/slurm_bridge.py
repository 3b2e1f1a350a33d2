"""The Slurm bridge on a real one-node cluster (munged, slurmctld, slurmd; needs root and
``apt-get install slurm-wlm munge``): what accelkit's prolog costs a job, and whether a job ever
sees a device Slurm did not allocate to it. Run from the repository root::

    .venv/bin/python tests/benchmarks/slurm_bridge.py --runs 20 --jobs 100

- ``first_line``: from starting ``srun --gres=gpu:1 echo`` until its first line arrives, median
  and p95 in ms, on three clusters side by side (they run at once and the samples go round
  them in turns, so load on the machine weighs on all alike): the floor ``without_prolog`` (no
  Prolog/TaskProlog/Epilog lines), ``with_prolog_command`` (Prolog runs ``accelkit slurm
  prolog``) and ``with_prolog_by_serve`` (the ``prolog-script``, answered by ``accelkit serve``),
  both with the task prolog script and the epilog; and the two ratios to the floor.
- ``foreign_devices``: ``--jobs`` jobs, four at a time, each ``--gres=gpu:K`` with K drawn from
  1..4 or ``-nK --gpus-per-task=1`` with K from 1..3 (seeded); a task counts when
  ``MOCK_CUDA_DEVICES`` differs from the GPUs of Slurm's ``SLURM_STEP_GPUS`` (its own, per
  task), a pair when tasks of two jobs running at the same time held the same device. Must be 0.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bridge" / "slurm"))

import cluster as slurm_cluster  # the tests' cluster helper

#: one line per task: start, end, Slurm's GPUs for the task, accelkit's variable
JOB = (
    "s=$(date +%s.%N); sleep 0.3; "
    'echo "T $s $(date +%s.%N) ${SLURM_STEP_GPUS:--} ${MOCK_CUDA_DEVICES:--}"'
)


def _first_line_ms(c: slurm_cluster.Cluster) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen(
        ["srun", "--gres=gpu:1", "echo", "hello"], env=c.env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    took = (time.perf_counter() - start) * 1000
    proc.wait(timeout=60)
    if line.strip() != "hello":
        msg = f"unexpected first line {line!r}: {c.log('slurmd.log')}"
        raise RuntimeError(msg)
    return took


def _wait_idle(c: slurm_cluster.Cluster) -> None:
    for _ in range(200):
        if not c.run("squeue", "-h").stdout.strip():
            return
        time.sleep(0.1)


#: the clusters timed side by side: no prolog, the prolog as a command, the prolog by serve
KINDS = {
    "without_prolog": {"prolog": False},
    "with_prolog_command": {"prolog": True},
    "with_prolog_by_serve": {"prolog": True, "serve": True},
}


def first_line(runs: int) -> dict[str, list[float]]:
    """Samples of each kind of cluster, taken in turns on clusters running at once."""
    roots = {kind: Path(tempfile.mkdtemp(prefix="accelkit-slurm-bench-")) for kind in KINDS}
    clusters: dict[str, slurm_cluster.Cluster] = {}
    try:
        for kind, root in roots.items():
            root.chmod(0o755)
            clusters[kind] = slurm_cluster.start(root, **KINDS[kind])
        samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for c in clusters.values():
            _first_line_ms(c)  # warm-up: caches, the first job's credential
        for _ in range(runs):
            for kind, c in clusters.items():
                _wait_idle(c)
                samples[kind].append(_first_line_ms(c))
        return samples
    finally:
        for c in clusters.values():
            c.stop()
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)


def foreign_devices(jobs: int, seed: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="accelkit-slurm-bench-"))
    root.chmod(0o755)
    c = slurm_cluster.start(root)
    rng = random.Random(seed)
    forms = [
        [f"--gres=gpu:{rng.randint(1, slurm_cluster.GPUS)}"]
        if rng.random() < 0.5
        else [f"-n{rng.randint(1, 3)}", "-O", "--gpus-per-task=1"]
        for _ in range(jobs)
    ]

    def one(job: tuple[int, list[str]]) -> tuple[int, int, list[list[str]]]:
        done = c.run("srun", *job[1], "sh", "-c", JOB, timeout=300)
        lines = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("T ")]
        return job[0], done.returncode, lines

    try:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(one, enumerate(forms)))
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
    wrong = failed = tasks = 0
    held: list[tuple[int, float, float, set[str]]] = []
    for job, rc, lines in results:
        if rc != 0 or not lines:
            failed += 1
            continue
        for start, end, gpus, mock in lines:
            tasks += 1
            slurm = {f"cuda{i}" for i in gpus.split(",") if i and gpus != "-"}
            mine = set() if mock == "-" else set(mock.split(","))
            if mine != slurm:
                wrong += 1
            held.append((job, float(start), float(end), mine))
    overlapping = sum(
        1
        for i, (j1, s1, e1, d1) in enumerate(held)
        for j2, s2, e2, d2 in held[i + 1 :]
        if j1 != j2 and s1 < e2 and s2 < e1 and d1 & d2
    )
    return {
        "jobs": jobs,
        "tasks": tasks,
        "failed": failed,
        "tasks_saw_devices_not_bound": wrong,
        "concurrent_jobs_sharing_a_device": overlapping,
    }


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered), 1),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args()
    reason = slurm_cluster.missing()
    if reason:
        raise SystemExit(f"error: {reason}")
    samples = first_line(args.runs)
    floor = statistics.median(samples["without_prolog"])
    result = {
        "first_line": {
            "runs": args.runs,
            **{kind: _summary(found) for kind, found in samples.items()},
            "ratio_command": round(statistics.median(samples["with_prolog_command"]) / floor, 2),
            "ratio_serve": round(statistics.median(samples["with_prolog_by_serve"]) / floor, 2),
        },
        "foreign_devices": foreign_devices(args.jobs, args.seed),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
