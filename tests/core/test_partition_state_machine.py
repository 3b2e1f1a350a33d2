"""Two accelkit processes over one ledger, each opening the node with its own, changing config.

A hypothesis state machine drives two real worker processes (``tests/fixtures/
partition_worker.py``). Each opens the node with a config the machine keeps editing (agents
added, removed or renamed; SHARED, AUTO_SPLIT and MANUAL with random assignments) and books
workloads whose leader is a real process of the test, alone or in both workers at once;
workloads end when the test ends their process (the next full reconciliation finishes them).
After every step no device is held by two live workloads, whatever partition each booking was
made under.

``ACCELKIT_PARTITION_EXAMPLES`` (default 15) sets the number of examples, for long campaigns.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from accelkit.workload import Ledger

WORKER = Path(__file__).resolve().parents[1] / "fixtures" / "partition_worker.py"
CPUS, GPUS = 4, 4
AGENT_NAMES = ("agent-1", "agent-2", "agent-3", "a2")
DEVICES = (
    '[[kinds]]\nkey = "cpu"\n'
    + "".join(f'[[kinds.devices]]\nid = "{i}"\n' for i in range(CPUS))
    + '[[kinds]]\nkey = "cuda"\n'
    + "".join(f'[[kinds.devices]]\nid = "cuda{i}"\n' for i in range(GPUS))
)
EXAMPLES = int(os.environ.get("ACCELKIT_PARTITION_EXAMPLES", "15"))

#: every run of the machine, for the campaign's figures (steps, bookings, refusals)
TALLY: Counter[str] = Counter()


class Worker:
    """A worker process and its JSON-lines protocol."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.agents: list[str] = []

    def send(self, request: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"worker ended: {self.process.wait()}"
        answer: dict[str, Any] = json.loads(line)
        assert "error" not in answer, answer["error"]
        return answer

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self.send(request)
        return self.receive()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.send({"op": "quit"})
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    """A mode, the agents, and for MANUAL each agent's cores and GPUs."""
    mode = draw(st.sampled_from(["shared", "auto-split", "manual"]))
    agents = draw(st.lists(st.sampled_from(AGENT_NAMES), min_size=1, max_size=3, unique=True))
    manual: dict[str, tuple[list[str], list[str]]] = {}
    if mode == "manual":
        cores = draw(st.permutations([str(i) for i in range(CPUS)]))
        gpus = draw(st.permutations([f"cuda{i}" for i in range(GPUS)]))
        owner = [draw(st.integers(-1, len(agents) - 1)) for _ in gpus]  # -1: nobody
        for i, agent in enumerate(agents):
            manual[agent] = (
                [c for j, c in enumerate(cores) if j % len(agents) == i],
                [g for g, o in zip(gpus, owner, strict=True) if o == i],
            )
    return {"mode": mode, "agents": agents, "manual": manual}


def config_text(root: Path, spec: dict[str, Any]) -> str:
    text = (
        f'[resource]\nallocation-mode = "{spec["mode"]}"\nreserved-cpu = 0\nreserved-mem = "0"\n'
        f'state-dir = "{root / "state"}"\n'
        '[plugins]\nallowed = ["mock"]\n[plugins.config.mock]\nconfig-file = "devices.toml"\n'
    )
    for agent in spec["agents"]:
        text += f'[[agents]]\nagent = {{ id = "{agent}" }}\n'
        if spec["mode"] == "manual":
            cores, gpus = spec["manual"][agent]
            text += f"[agents.resource]\ncpu = {json.dumps(cores)}\n"
            if gpus:  # an empty list is refused: no devices is said by leaving it out
                text += f"devices = {{ cuda = {json.dumps(gpus)} }}\n"
    return text


class PartitionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="accelkit-partition-"))
        (self.root / "devices.toml").write_text(DEVICES)
        self.configs = 0
        self.leaders: dict[str, subprocess.Popen[bytes]] = {}
        self.ended: set[str] = set()  # kept here: a precondition must not ask the processes
        self.workers = [Worker(), Worker()]
        first = {"mode": "shared", "agents": ["agent-1"], "manual": {}}
        for worker in self.workers:
            self.open(worker, first)
        TALLY["runs"] += 1

    def open(self, worker: Worker, spec: dict[str, Any]) -> None:
        self.configs += 1
        path = self.root / f"host-{self.configs}.toml"
        path.write_text(config_text(self.root, spec))
        worker.agents = worker.ask({"op": "open", "config": str(path)})["ok"]
        TALLY["opens"] += 1

    def leader(self) -> tuple[str, int]:
        process = subprocess.Popen(["sleep", "3600"])
        workload = f"w{len(self.leaders)}"
        self.leaders[workload] = process
        return workload, process.pid

    def booking(self, worker: Worker, agent: int, cpus: int, gpus: int) -> dict[str, Any]:
        workload, pid = self.leader()
        slots = {k: str(v) for k, v in (("cpu", cpus), ("cuda.device", gpus)) if v}
        name = worker.agents[agent % len(worker.agents)]
        return {"op": "book", "agent": name, "id": workload, "slots": slots, "leader": pid}

    def tally(self, answer: dict[str, Any]) -> None:
        if "ok" in answer:
            TALLY["granted"] += 1
        else:  # "InsufficientResource: ...", "InvalidResourceArgument: unknown agent ..."
            TALLY[f"refused {answer['refused'].split(':')[0]}"] += 1

    @rule(worker=st.integers(0, 1), spec=configs())
    def reconfigure(self, worker: int, spec: dict[str, Any]) -> None:
        self.open(self.workers[worker], spec)

    @rule(
        worker=st.integers(0, 1),
        agent=st.integers(0, 2),
        cpus=st.integers(0, 2),
        gpus=st.integers(0, 2),
    )
    def book(self, worker: int, agent: int, cpus: int, gpus: int) -> None:
        chosen = self.workers[worker]
        self.tally(chosen.ask(self.booking(chosen, agent, cpus, gpus)))

    @rule(
        agents=st.tuples(st.integers(0, 2), st.integers(0, 2)),
        gpus=st.tuples(st.integers(0, 2), st.integers(0, 2)),
    )
    def book_in_both_at_once(self, agents: tuple[int, int], gpus: tuple[int, int]) -> None:
        for worker, agent, count in zip(self.workers, agents, gpus, strict=True):
            worker.send(self.booking(worker, agent, 1, count))
        for worker in self.workers:
            self.tally(worker.receive())

    @precondition(lambda self: len(self.ended) < len(self.leaders))
    @rule(data=st.data())
    def end_a_workload(self, data: st.DataObject) -> None:
        live = sorted(w for w in self.leaders if w not in self.ended)
        workload = data.draw(st.sampled_from(live))
        self.ended.add(workload)
        self.leaders[workload].kill()
        self.leaders[workload].wait()
        TALLY["ended"] += 1

    @invariant()
    def no_device_held_by_two_live_workloads(self) -> None:
        held: Counter[tuple[str, str]] = Counter()
        for record in Ledger(self.root / "state").read_all().values():
            assert record.leader is not None
            if not record.leader.is_running():
                continue
            for plugin, alloc in record.allocation.items():
                for per_device in alloc.values():
                    held.update((plugin, d) for d, a in per_device.items() if a)
        twice = sorted(device for device, count in held.items() if count > 1)
        assert not twice, f"held by two live workloads: {twice}"
        TALLY["checks"] += 1

    def teardown(self) -> None:
        for worker in self.workers:
            worker.stop()
        for process in self.leaders.values():
            if process.poll() is None:
                process.kill()
            process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


PartitionMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_partition_machine = pytest.mark.slow(
    pytest.mark.timeout(60 + 30 * EXAMPLES)(PartitionMachine.TestCase)
)


def test_report_the_campaign() -> None:
    """Prints what the machine did (run it after the machine, e.g. ``-s``)."""
    print(f"partition state machine: {dict(TALLY)}")
