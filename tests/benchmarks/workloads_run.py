"""R1 and R2 of WORKLOADS.md, and the crash figures of the process runtime.

R1: ``accelkit run --slots cpu=1 -- true`` on the demo node, 20 times, beside ``python -c pass``,
the bare import of accelkit's own dependencies and ``python -c "import accelkit"``, in
alternation (one of each per round), so that drift hits them alike. R2: ``Node.run`` of
``true`` in-process, 200 times (book, cgroups, hooks, start, wait, teardown, release), beside
the floor of starting and waiting for ``true`` with asyncio in the same process.

Crash figures (``--crash N``): for each lifecycle step, N times with a child that outlives its
leader and N times with a ``setsid`` daemon: ``accelkit run`` is killed with SIGKILL at the step,
a second run asks for a GPU while the child lives (a double grant is the held GPU given to it),
then the child ends, the node is reconciled, one more run is made, and the processes (leader,
child) and the killed run's cgroups still there are counted. At the steps after ``exited`` the
child has already ended (the run gets there only once every process of the workload is gone).

    python tests/benchmarks/workloads_run.py [--r1] [--r2] [--crash 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import psutil

from accelkit.cgroup import CgroupFS
from accelkit.config import load_host_config
from accelkit.node import Node
from accelkit.runtime.cgroups import V1_CONTROLLERS
from accelkit.runtime.process_stamp import ProcessStamp
from accelkit.types import AgentId, SlotName
from accelkit.workload import Ledger

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "docs/examples"
ACCELKIT = [sys.executable, "-c", "from accelkit.cli.app import run; run()"]
PAUSING_RUN = ROOT / "tests" / "fixtures" / "pausing_run.py"
DEPENDENCIES = "import attrs, cattrs, frozendict, pluggy, psutil, click, rich, prometheus_client"
AGENT = AgentId("agent-1")
R1_RUNS = 20
R2_RUNS = 200
BEFORE_STEPS = (
    "booked",
    "pre_create:cuda",
    "pre_create:cpu",
    "pre_create:mem",
    "prepared",
    "created",
)
LIVE_STEPS = ("spawned", "post_create:cuda", "post_create:cpu", "post_create:mem", "running")
AFTER_STEPS = (
    "exited",
    "pre_terminate:mem",
    "pre_terminate:cpu",
    "pre_terminate:cuda",
    "post_terminate:mem",
    "post_terminate:cpu",
    "post_terminate:cuda",
)


def write_demo(root: Path) -> Path:
    """The demo node with its ledger under ``root``; the host config's path."""
    shutil.copy(DEMO / "mock-devices.toml", root / "mock-devices.toml")
    text = (DEMO / "demo.toml").read_text()
    text = text.replace("[resource]\n", f'[resource]\nstate-dir = "{root / "state"}"\n', 1)
    config = root / "demo.toml"
    config.write_text(text)
    return config


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ACCELKIT_")}


def _wall(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env or _env(), stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _installed_env(cache: Path) -> dict[str, str]:
    """The environment of an installed accelkit: its modules' bytecode cached (pip compiles a
    wheel's at install time), here under ``cache`` so the source tree stays clean. Without it a
    checkout run with ``PYTHONDONTWRITEBYTECODE`` compiles every module of accelkit on every
    start, while its dependencies' bytecode is cached: that measures the compiler."""
    env = {k: v for k, v in _env().items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(cache)}


def r1(config: Path, runs: int = R1_RUNS) -> dict[str, Any]:
    """Median wall seconds of each command, measured in alternation."""
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "import dependencies": [sys.executable, "-c", DEPENDENCIES],
        "import accelkit": [sys.executable, "-c", "import accelkit.cli.app"],
        "accelkit plugins": [*ACCELKIT, "plugins", "--config", str(config)],
        "accelkit run -- true": [
            *ACCELKIT,
            "run",
            "--config",
            str(config),
            "--agent",
            str(AGENT),
            "--slots",
            "cpu=1",
            "--",
            "true",
        ],
    }
    env = _installed_env(config.parent / "pycache")
    for argv in commands.values():  # warm the page cache, write the bytecode cache
        _wall(argv, env)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            times[name].append(_wall(argv, env))
    medians = {name: statistics.median(values) * 1000 for name, values in times.items()}
    floor = medians["import dependencies"]
    return {
        "median_ms": {k: round(v, 1) for k, v in medians.items()},
        "run / import dependencies": round(medians["accelkit run -- true"] / floor, 2),
        "plugins / import dependencies": round(medians["accelkit plugins"] / floor, 2),
        "run / import accelkit": round(
            medians["accelkit run -- true"] / medians["import accelkit"], 2
        ),
    }


async def r2(config: Path, runs: int = R2_RUNS) -> dict[str, Any]:
    """Median µs of one ``Node.run`` of ``true``, and of the asyncio spawn floor."""
    slots = {SlotName("cpu"): Decimal(1)}
    run_times: list[float] = []
    floor_times: list[float] = []
    own_cpu = children_cpu = 0.0
    async with Node.open(load_host_config(config)) as node:
        for _ in range(runs):
            before = _cpu()
            start = time.perf_counter()
            status = await node.run(AGENT, slots, ["true"])
            run_times.append(time.perf_counter() - start)
            after = _cpu()
            own_cpu += after[0] - before[0]
            children_cpu += after[1] - before[1]
            assert status == 0
            start = time.perf_counter()
            process = await asyncio.create_subprocess_exec("true")
            await process.wait()
            floor_times.append(time.perf_counter() - start)
    run_us = statistics.median(run_times) * 1e6
    floor_us = statistics.median(floor_times) * 1e6
    return {
        "median_us": {"Node.run(true)": round(run_us), "spawn+wait floor": round(floor_us)},
        "run / floor": round(run_us / floor_us, 1),
        # per run: this process (the node), and its children reaped meanwhile (the launchers,
        # the command): the runs' CPU on the machine's cores, beside their wall time
        "cpu_us_per_run": {
            "process": round(own_cpu / runs * 1e6),
            "children": round(children_cpu / runs * 1e6),
        },
    }


def _cpu() -> tuple[float, float]:
    """CPU seconds of this process and of its reaped children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


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

LEADER = """
import pathlib, subprocess, sys, time
out = pathlib.Path(sys.argv[1])
subprocess.Popen([sys.executable, "-c", sys.argv[2], str(out), sys.argv[3]])
while not (out / "pid").exists():
    time.sleep(0.02)
"""


def _run_argv(config: Path, slots: str) -> list[str]:
    return [*ACCELKIT, "run", "--config", str(config), "--agent", str(AGENT), "--slots", slots]


def _recorded(config: Path) -> tuple[int, list[Path], set[str]]:
    """The killed run's leader pid, cgroup directories and GPUs, from its ledger record."""
    [record] = Ledger(config.parent / "state").read_all().values()
    data = record.to_json()
    leader = int(data["workload"]["id"].removeprefix("pid:"))
    if data["handle"] is not None:
        details = data["handle"]["details"]
        dirs = [Path(v) for k, v in details.items() if k.startswith("cgroup.")]
    else:  # made before the record names them: under this process's own groups
        fs = CgroupFS.read()
        name = data["workload"]["id"].replace(":", "-")
        owns = (fs.process_directory(c) for c in V1_CONTROLLERS)
        dirs = [own.path / "accelkit" / str(AGENT) / name for own in owns if own is not None]
    gpus = {dev for per in data["allocation"].get("cuda", {}).values() for dev in per}
    return leader, dirs, gpus


PRINT_GPUS = "import os; print(os.environ.get('MOCK_CUDA_DEVICES', ''))"


def _crash_once(config: Path, out: Path, step: str, kind: str) -> dict[str, int]:
    out.mkdir()
    if step in AFTER_STEPS:
        (out / "go").write_text("1")  # the run reaches them only once every process has ended
    argv = [*_run_argv(config, "cuda.device=1,cpu=1,mem=1G"), "--"]
    argv[: len(ACCELKIT)] = [sys.executable, str(PAUSING_RUN), step]  # the run pauses at step
    argv += [sys.executable, "-c", LEADER, str(out), SURVIVOR, kind]
    run = subprocess.Popen(
        argv,
        env=_env(),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert run.stderr is not None
    for line in run.stderr:
        if line.strip() == f"accelkit: paused at {step}":
            break
    child = None
    if step not in BEFORE_STEPS:
        while not (out / "pid").exists():
            time.sleep(0.01)
        child = ProcessStamp.of(int((out / "pid").read_text()))
    leader, groups, held = _recorded(config)
    run.send_signal(signal.SIGKILL)
    run.wait()
    second = subprocess.run(  # may get another GPU of the agent, never the one held
        [*_run_argv(config, "cuda.device=1"), "--", sys.executable, "-c", PRINT_GPUS],
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    got = set(second.stdout.split()[-1].split(",")) if second.returncode == 0 else set()
    double = len(got & held) if child is not None and child.is_running() else 0
    (out / "go").write_text("1")
    while child is not None and child.is_running():
        time.sleep(0.01)
    asyncio.run(_reconcile(config))  # the dead workload's teardown
    subprocess.run([*_run_argv(config, "cpu=1"), "--", "true"], env=_env(), check=True)
    leaked = _leaked_processes(out) + int(_running(leader))
    cgroups = sum(1 for group in groups if group.exists())
    return {"double_grants": double, "leaked_processes": leaked, "leaked_cgroups": cgroups}


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _reconcile(config: Path) -> None:
    async with Node.open(load_host_config(config)):
        pass


def _leaked_processes(out: Path) -> int:
    count = 0
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if str(out) in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            count += 1
    return count


def crash_figures(repeats: int) -> dict[str, Any]:
    """Kill ``accelkit run`` at each step ``repeats`` times per kind; sum what was left."""
    totals: dict[str, Any] = {}
    for kind in ("child", "daemon"):
        for step in (*BEFORE_STEPS, *LIVE_STEPS, *AFTER_STEPS):
            sums = {"runs": 0, "double_grants": 0, "leaked_processes": 0, "leaked_cgroups": 0}
            for _ in range(repeats):
                with tempfile.TemporaryDirectory() as root:
                    config = write_demo(Path(root))
                    figures = _crash_once(config, Path(root) / "out", step, kind)
                sums["runs"] += 1
                for key, value in figures.items():
                    sums[key] += value
            totals[f"{kind}@{step}"] = sums
    return totals


def main(argv: list[str] | None = None) -> int:
    """Print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--r1", action="store_true")
    parser.add_argument("--r2", action="store_true")
    parser.add_argument("--crash", type=int, default=0, metavar="N")
    args = parser.parse_args(argv)
    everything = not (args.r1 or args.r2 or args.crash)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as root:
        config = write_demo(Path(root))
        if args.r1 or everything:
            out["R1"] = r1(config)
        if args.r2 or everything:
            out["R2"] = asyncio.run(r2(config))
    if args.crash:
        out["crash"] = crash_figures(args.crash)
    print(json.dumps(out, indent=2))
    return 0


def _register() -> None:
    from harness import Trial, add

    def bench_r2() -> Trial:
        with tempfile.TemporaryDirectory() as root:
            start = time.perf_counter()
            figures = asyncio.run(r2(write_demo(Path(root)), runs=50))
            notes = {k: f"{v} µs" for k, v in figures["median_us"].items()}
            notes["run / floor"] = str(figures["run / floor"])
            return Trial(50, time.perf_counter() - start, notes=notes)

    add("run.R2.node-run-true", bench_r2)


if __name__ == "__main__":
    sys.exit(main())
else:
    _register()
