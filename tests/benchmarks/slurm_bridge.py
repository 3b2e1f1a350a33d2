"""The Slurm bridge on a real one-node cluster (munged, slurmctld, slurmd; needs root and
``apt-get install slurm-wlm munge``): what accelkit's prolog costs a job, and whether a job ever
sees a device Slurm did not allocate to it. Run from the repository root::

    .venv/bin/python tests/benchmarks/slurm_bridge.py --runs 20 --jobs 100

- ``first_line``: from starting ``srun --gres=gpu:1 echo`` until its first line arrives, median
  and p95 in ms, ``with_prolog`` (accelkit's Prolog/TaskProlog/Epilog) and the floor
  ``without_prolog`` (the same cluster config with no Prolog/TaskProlog/Epilog lines, started
  in the same run), and their ratio.
- ``foreign_devices``: ``--jobs`` jobs, four at a time, each ``--gres=gpu:K`` with K drawn from
  1..4 (seeded); a job counts when ``MOCK_CUDA_DEVICES`` differs from the GPUs of Slurm's
  ``SLURM_STEP_GPUS``, or when a job running at the same time held one of its devices. Must be 0.

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

JOB = (
    'echo "START=$(date +%s.%N)"; echo "GPUS=$SLURM_STEP_GPUS"; '
    'echo "MOCK=$MOCK_CUDA_DEVICES"; sleep 0.3; echo "END=$(date +%s.%N)"'
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


def first_line(prolog: bool, runs: int) -> list[float]:
    root = Path(tempfile.mkdtemp(prefix="accelkit-slurm-bench-"))
    root.chmod(0o755)
    c = slurm_cluster.start(root, prolog=prolog)
    try:
        _first_line_ms(c)  # warm-up: caches, the first job's credential
        samples = []
        for _ in range(runs):
            _wait_idle(c)
            samples.append(_first_line_ms(c))
        return samples
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


def foreign_devices(jobs: int, seed: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="accelkit-slurm-bench-"))
    root.chmod(0o755)
    c = slurm_cluster.start(root)
    rng = random.Random(seed)
    counts = [rng.randint(1, slurm_cluster.GPUS) for _ in range(jobs)]

    def one(count: int) -> dict[str, str]:
        done = c.run("srun", f"--gres=gpu:{count}", "sh", "-c", JOB, timeout=300)
        out = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
        out["rc"] = str(done.returncode)
        out["count"] = str(count)
        return out

    try:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(one, counts))
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
    wrong = 0
    failed = 0
    held: list[tuple[float, float, set[str]]] = []
    for r in results:
        if r["rc"] != "0" or "START" not in r:
            failed += 1
            continue
        slurm = {f"cuda{i}" for i in r["GPUS"].split(",") if i}
        mine = set(filter(None, r["MOCK"].split(",")))
        if mine != slurm or len(mine) != int(r["count"]):
            wrong += 1
        held.append((float(r["START"]), float(r["END"]), mine))
    overlapping = sum(
        1
        for i, (s1, e1, d1) in enumerate(held)
        for s2, e2, d2 in held[i + 1 :]
        if s1 < e2 and s2 < e1 and d1 & d2
    )
    return {
        "jobs": jobs,
        "failed": failed,
        "saw_devices_not_allocated": wrong,
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
    without = first_line(False, args.runs)
    with_prolog = first_line(True, args.runs)
    result = {
        "first_line": {
            "runs": args.runs,
            "without_prolog": _summary(without),
            "with_prolog": _summary(with_prolog),
            "ratio": round(statistics.median(with_prolog) / statistics.median(without), 2),
        },
        "foreign_devices": foreign_devices(args.jobs, args.seed),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
