"""Commands people wait for, each as a fresh process, against floors measured in the same run.

The floor is the import of accelkit's command-line dependencies (``python -c "import attrs,
cattrs, frozendict, pluggy, psutil, click, rich, prometheus_client"``): no accelkit command
can start for less. Every round runs the floor and each command once, in alternation, so that
the machine's drift hits them alike; the figures are medians over the rounds, in the CPU time
of the child process (user + system, ``getrusage``) and in wall time. Bytecode is cached as an
installed package's is (one untimed run of each command first).

- ``--status``: a SHARED node of 256 mock cores, 2 TiB and 64 mock GPUs whose ledger holds
  2,000 live workloads (each holds 1 GiB; the first 256 a core, the first 64 a GPU), booked by
  this process, which stays alive while the commands run, so every record's owner is a live
  process whose liveness ``status`` checks; ``accelkit status --json`` and the table.
- ``--devices``: the same node split over 16 agents (``bench_plan.py``'s), ``accelkit devices``
  and ``accelkit metrics``, as tables and with ``--json``.
- ``--docker``: a dockerd of this run (vfs storage, no network, a static-busybox image, as the
  runtime tests start theirs); ``docker run --rm IMG true`` against ``accelkit run --runtime
  docker --image IMG -- true`` on the same engine, in wall time (the engine's work is in
  dockerd, whose time is in no child's figure) and the CPU time of the client process.

    python tests/benchmarks/cli_floor.py --status --devices --docker [--rounds 9] [--base DIR]

``--base DIR`` runs each accelkit command a second time with DIR's ``core/src`` and
``plugins/*/src`` first on ``PYTHONPATH`` (``git archive REV core plugins | tar -x -C DIR``):
before and after, same run. A
``PYTHONPATH`` set for the benchmark itself is what the other commands run.

Prints one JSON object: per command its medians (ms) and its ratio to the floor (or, for the
docker run, to ``docker run --rm``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

from large_node import DEVICE_FILE, write_devices

ROOT = Path(__file__).resolve().parents[2]
ACCELKIT = str(Path(sys.executable).with_name("accelkit"))
FLOOR = [
    sys.executable,
    "-c",
    "import attrs, cattrs, frozendict, pluggy, psutil, click, rich, prometheus_client",
]
WORKLOADS = 2000
#: as installed: bytecode caches may be written and used (a shell may forbid them for itself)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def write_node(folder: Path, *, mode: str) -> Path:
    """The large mock node (256 cores on 4 NUMA nodes, 2 TiB, 64 GPUs) and its host config."""
    write_devices(folder)
    config = folder / "host.toml"
    config.write_text(
        f'[resource]\nallocation-mode = "{mode}"\nreserved-cpu = 0\nreserved-mem = "0"\n'
        f'state-dir = "{folder / "state"}"\n'
        '[plugins]\nallowed = ["mock"]\n'
        f'[plugins.config.mock]\nconfig-file = "{DEVICE_FILE}"\n',
        encoding="utf-8",
    )
    return config


#: ``--base DIR``: the accelkit commands again, with the sources under DIR first on the path
BASE: list[Path] = []


def base_path() -> str:
    """``PYTHONPATH`` for the base code: its core and, where the tree has them, its plugins
    (a plugin of one version may not load on the core of another)."""
    plugins = sorted(BASE[0].glob("plugins/*/src"))
    return os.pathsep.join(str(path) for path in [BASE[0] / "core" / "src", *plugins])


def timed(command: Sequence[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """CPU seconds (user + system) and wall seconds of one run of ``command``."""
    env = dict(env or ENV)
    if command[0] == "base":  # the same command, run with the code under --base
        command = command[1:]
        env["PYTHONPATH"] = base_path()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def alternate(
    commands: dict[str, Sequence[str]],
    rounds: int,
    env: dict[str, str] | None = None,
    *,
    twins: bool = True,
) -> dict[str, dict[str, float]]:
    """Median CPU and wall ms of each command, run once per round in turn (after a warm-up).

    With ``--base``, each accelkit command has a twin ``NAME (base)`` run from those sources.
    """
    if BASE and twins:
        commands = dict(commands) | {
            f"{name} (base)": ["base", *command]
            for name, command in commands.items()
            if command[0] == ACCELKIT
        }
    for command in commands.values():
        timed(command, env)
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    wall: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            c, w = timed(command, env)
            cpu[name].append(c)
            wall[name].append(w)
    return {
        name: {
            "cpu_ms": round(statistics.median(cpu[name]) * 1000, 1),
            "wall_ms": round(statistics.median(wall[name]) * 1000, 1),
        }
        for name in commands
    }


def with_ratios(figures: dict[str, dict[str, float]], base: str) -> dict[str, dict[str, float]]:
    """Each figure with its CPU and wall ratio to ``base``'s."""
    floor = figures[base]
    for name, row in figures.items():
        if name != base:
            row["cpu_ratio"] = round(row["cpu_ms"] / floor["cpu_ms"], 2)
            row["wall_ratio"] = round(row["wall_ms"] / floor["wall_ms"], 2)
    return figures


async def book_live(config: Path, count: int) -> None:
    """Book ``count`` workloads owned (and led) by this process, which stays alive."""
    from accelkit.config import load_host_config
    from accelkit.node import Node
    from accelkit.types import AgentId, SlotName, Workload

    try:
        from accelkit.runtime.process_stamp import ProcessStamp
    except ImportError:  # the code before the stamps moved to the runtime layer
        from accelkit.workload.liveness import ProcessStamp  # type: ignore[attr-defined,no-redef]

    stamp = ProcessStamp.of(os.getpid())
    agent = AgentId("agent-1")
    async with Node.open(load_host_config(config)) as node:
        for i in range(count):
            slots = {SlotName("mem"): Decimal(2**30)}
            if i < 256:
                slots[SlotName("cpu")] = Decimal(1)
            if i < 64:
                slots[SlotName("cuda.device")] = Decimal(1)
            await node.book(agent, Workload.process_tree(f"bench-{i:04d}"), slots, leader=stamp)


def bench_status(rounds: int) -> dict[str, dict[str, float]]:
    """``accelkit status`` (JSON and table) with 2,000 live workloads, beside the floor.

    With ``--base`` the base code gets a ledger of its own, booked by a child process of the
    base code that stays alive (the record format may differ between the two).
    """
    folder = Path(tempfile.mkdtemp(prefix="accelkit-bench-status-"))
    holder = None
    try:
        config = write_node(folder, mode="shared")
        asyncio.run(book_live(config, WORKLOADS))
        status = [ACCELKIT, "status", "--config", str(config)]
        commands: dict[str, Sequence[str]] = {
            "floor": FLOOR,
            "status --json": [*status, "--json"],
            "status": status,
        }
        if BASE:
            (folder / "base").mkdir()
            base_config = write_node(folder / "base", mode="shared")
            env = {**ENV, "PYTHONPATH": base_path()}
            holder = subprocess.Popen(
                [sys.executable, __file__, "--hold", str(base_config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                text=True,
            )
            assert holder.stdout is not None
            if holder.stdout.readline() != "ready\n":
                msg = "the base code could not book its workloads"
                raise RuntimeError(msg)
            base = ["base", ACCELKIT, "status", "--config", str(base_config)]
            commands |= {"status --json (base)": [*base, "--json"], "status (base)": base}
        figures = with_ratios(alternate(commands, rounds, twins=False), "floor")
        for command in [status, *([base] if BASE else [])]:
            shown = timed_output([*command, "-q"])
            if len(shown.split()) != WORKLOADS:  # every workload booked stayed live
                msg = f"{command[0]} status showed {len(shown.split())} workloads, not {WORKLOADS}"
                raise AssertionError(msg)
        return figures
    finally:
        if holder is not None:
            holder.communicate("")
        shutil.rmtree(folder, ignore_errors=True)


def timed_output(command: Sequence[str]) -> str:
    """The stdout of ``command`` (``base`` first: run with the base code)."""
    env = dict(ENV)
    if command[0] == "base":
        command = command[1:]
        env["PYTHONPATH"] = base_path()
    return subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout


def hold(config: Path) -> None:
    """Book the workloads of ``config``, say ``ready``, and live until stdin closes."""
    asyncio.run(book_live(config, WORKLOADS))
    print("ready", flush=True)
    sys.stdin.read()


def bench_devices(rounds: int) -> dict[str, dict[str, float]]:
    """``accelkit devices`` and ``metrics``, tables and JSON, on the large node of 16 agents."""
    folder = Path(tempfile.mkdtemp(prefix="accelkit-bench-devices-"))
    try:
        config = write_node(folder, mode="auto-split")
        agents = "".join(f'[[agents]]\nagent = {{ id = "agent-{i}" }}\n' for i in range(1, 17))
        config.write_text(config.read_text() + agents, encoding="utf-8")
        base = ["--config", str(config)]
        commands = {
            "floor": FLOOR,
            "devices": [ACCELKIT, "devices", *base],
            "devices --json": [ACCELKIT, "devices", *base, "--json"],
            "metrics": [ACCELKIT, "metrics", *base],
            "metrics --json": [ACCELKIT, "metrics", *base, "--json"],
        }
        return with_ratios(alternate(commands, rounds), "floor")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def dockerd() -> Iterator[tuple[str, str]]:
    """A dockerd of this run with the busybox test image: its address and the image."""
    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    from conftest import IMAGE, busybox_image_tar  # the runtime tests' engine set-up

    root = Path(tempfile.mkdtemp(prefix="akb-", dir="/tmp"))
    sock, log = root / "docker.sock", root / "dockerd.log"
    argv = ["dockerd", "--iptables=false", "--ip6tables=false", "--bridge=none",
            "--storage-driver=vfs", f"--data-root={root / 'data'}", f"--exec-root={root / 'exec'}",
            f"--pidfile={root / 'dockerd.pid'}", f"--host=unix://{sock}"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"unix://{sock}"
        deadline = time.monotonic() + 60
        while subprocess.run(
            ["docker", "-H", url, "version"], check=False, capture_output=True
        ).returncode:
            if proc.poll() is not None or time.monotonic() > deadline:
                msg = f"dockerd did not start: {log.read_text()[-2000:]}"
                raise RuntimeError(msg)
            time.sleep(0.2)
        tar = busybox_image_tar(root / "busybox.tar")
        subprocess.run(["docker", "-H", url, "import", str(tar), IMAGE], check=True)
        yield url, IMAGE
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(root, ignore_errors=True)


def bench_docker(rounds: int) -> dict[str, dict[str, float]]:
    """``accelkit run --runtime docker -- true`` against ``docker run --rm`` on one engine."""
    folder = Path(tempfile.mkdtemp(prefix="accelkit-bench-docker-"))
    try:
        config = write_node(folder, mode="shared")
        with dockerd() as (url, image):
            env = {**ENV, "DOCKER_HOST": url}
            run = ["--slots", "cpu=1", "--runtime", "docker", "--image", image, "--", "true"]
            commands = {
                "floor": FLOOR,
                "docker run --rm": ["docker", "run", "--rm", image, "true"],
                "accelkit run --runtime docker": [ACCELKIT, "run", "--config", str(config), *run],
            }
            figures = alternate(commands, rounds, env)
        docker = figures["docker run --rm"]
        for name, run in figures.items():
            if name.startswith("accelkit run"):
                run["wall_ratio_to_docker_run"] = round(run["wall_ms"] / docker["wall_ms"], 2)
                run["cpu_ratio_to_floor"] = round(run["cpu_ms"] / figures["floor"]["cpu_ms"], 2)
        return figures
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    """Run the benchmarks asked for; print their figures as one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--status", action="store_true")
    parser.add_argument("--devices", action="store_true")
    parser.add_argument("--docker", action="store_true")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--base", type=Path, help="a checkout (or extracted tree) to run beside, for before/after"
    )
    parser.add_argument("--hold", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hold is not None:
        hold(args.hold)
        return
    if args.base is not None:
        BASE.append(args.base.resolve())
    result: dict[str, object] = {}
    try:
        if args.status:
            result["status"] = bench_status(args.rounds)
        if args.devices:
            result["devices"] = bench_devices(args.rounds)
        if args.docker:
            result["docker"] = bench_docker(args.rounds)
    finally:  # what was measured is printed, also when a later part failed
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
