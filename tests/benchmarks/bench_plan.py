"""The partition plan of a large mock node: in-process, and as a whole ``accelkit plan`` process.

The node: 256 cpu cores on 4 NUMA nodes, 2 TiB of memory and 64 GPUs, split AUTO_SPLIT over
16 agents. The process benchmark compares ``accelkit plan --json`` with the floor any accelkit
process pays, ``python -c "import pluggy, attrs, psutil"``; the goal is at most 1.3x.

    python tests/benchmarks/bench_plan.py        # prints both figures and the ratio

``workloads_plan.py`` registers the same benchmarks with the harness of ``run.py``.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import Trial, add
from large_node import DEVICE_FILE, write_devices

AGENTS = 16
BASELINE = [sys.executable, "-c", "import pluggy, attrs, psutil"]
#: runs of each command per trial of the process benchmark (their median is the figure)
PROCESS_RUNS = 5


def write_node(folder: Path) -> Path:
    """Write the mock node's device file and host config into ``folder``; return the config."""
    write_devices(folder)
    config = folder / "host.toml"
    config.write_text(
        '[resource]\nallocation-mode = "auto-split"\n'
        '[plugins]\nallowed = ["mock"]\n'
        f'[plugins.config.mock]\nconfig-file = "{DEVICE_FILE}"\n',
        encoding="utf-8",
    )
    return config


_FOLDER = Path(tempfile.mkdtemp(prefix="accelkit-bench-plan-"))
# made at import (the harness registers these benchmarks by importing this module), so removed
# at exit, whichever benchmarks ran
atexit.register(shutil.rmtree, _FOLDER, ignore_errors=True)
CONFIG = write_node(_FOLDER)
ACCELKIT = Path(sys.executable).with_name("accelkit")
PLAN = [str(ACCELKIT), "plan", "--config", str(CONFIG), "--agents", str(AGENTS), "--json"]


def plan_in_process() -> Trial:
    """Load the config, start the host (plugins, discovery, partition, contexts), build the plan."""
    from accelkit.config import load_host_config
    from accelkit.host import PartitionHost

    async def once() -> dict[str, object]:
        config = load_host_config(CONFIG).with_agent_count(AGENTS)
        async with PartitionHost.open(config) as host:
            return host.plan()

    start = time.perf_counter()
    plan = asyncio.run(once())
    elapsed = time.perf_counter() - start
    agents = plan["agents"]
    assert isinstance(agents, dict)
    return Trial(ops=1, seconds=elapsed, ok=len(agents), failed=0)


#: as installed: bytecode caches may be written and used (a shell may forbid them for itself)
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=_ENV)
    return time.perf_counter() - start


def plan_process() -> Trial:
    """Median wall time of the whole ``accelkit plan --json`` process, with the baseline's."""
    plan_times, base_times = [], []
    _wall(PLAN)  # warm-up: writes the bytecode caches an installed package has
    for _ in range(PROCESS_RUNS):  # interleaved, so both see the same machine load
        base_times.append(_wall(BASELINE))
        plan_times.append(_wall(PLAN))
    plan_s, base_s = statistics.median(plan_times), statistics.median(base_times)
    notes = {
        "baseline_ms": f"{base_s * 1000:.1f}",
        "plan_ms": f"{plan_s * 1000:.1f}",
        "ratio_vs_baseline": f"{plan_s / base_s:.2f}",
        "goal": "1.30",
    }
    return Trial(ops=1, seconds=plan_s, notes=notes)


def register() -> None:
    """Add the plan benchmarks to the harness registry."""
    add("plan.inprocess.256c-4numa-2T-64gpu-16agents", plan_in_process)
    add("plan.process.accelkit-plan-json", plan_process)


if __name__ == "__main__":
    in_process = statistics.median(plan_in_process().seconds for _ in range(5))
    trial = plan_process()
    print(f"in-process plan: {in_process * 1000:.1f} ms (median of 5)")
    for key, value in trial.notes.items():
        print(f"{key}: {value}")
