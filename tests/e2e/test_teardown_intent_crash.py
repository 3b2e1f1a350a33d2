"""kill -9 at every point of a workload's hooks, then reconciliation: no post_terminate is lost.

A driver process opens a node, books a workload of the mock cuda, cpu and mem plugins and runs its
whole lifecycle; every hook call is journalled (an fsync'd line) as the hook does its work. The
driver pauses at a chosen point — after the intent is recorded and before the hook is called
(``before``), inside the hook after its work (``inside``: the hook "returned" but the ledger does
not know yet, the window that used to lose ``post_terminate``), or after the result is recorded
(``after``) — and is killed there with SIGKILL. A node opened afterwards must give every hook
whose ``pre_create`` was started a ``post_terminate`` (at least once), free everything and leave
an empty ledger; without a crash, every hook gets exactly one.

The random-instant test kills two drivers that book and tear down in a loop at random moments,
side by side on one ledger: the ledger stays readable, no device is booked twice, and no started
``pre_create`` misses its ``post_terminate``.
"""

from __future__ import annotations

import asyncio
import collections
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accelkit.config import load_host_config
from accelkit.node import Node
from accelkit.testing.cli_runner import cli_env
from accelkit.types import AgentId
from accelkit.workload import Ledger
from accelkit_mock.plugin import MockLifecycleHook

pytestmark = pytest.mark.slow  # crash tests: real processes killed at every step

PLUGINS = ("cuda", "cpu", "mem")
PHASES = ("pre_create", "post_create", "pre_terminate", "post_terminate")
WHEN = ("before", "inside", "after")

DRIVER = r"""
import asyncio, os, sys, time
from decimal import Decimal
from accelkit.config import load_host_config
from accelkit.node import Node
from accelkit.types import AgentId, SlotName, Workload
from accelkit.workload.bookkeeper import Bookkeeper
from accelkit_mock.plugin import MockLifecycleHook

config, journal, pause, loops = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
SLOTS = {SlotName("cuda.device"): Decimal(1), SlotName("cpu"): Decimal(1)}
SLOTS[SlotName("mem")] = Decimal(1024)

def stop_here(point):
    if point == pause:
        print("paused", flush=True)
        while True:
            time.sleep(3600)

def journalled(phase):
    original = getattr(MockLifecycleHook, phase)
    async def hook(self):
        result = await original(self)
        fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, f"{self.workload.id} {self.key} {phase}\n".encode())
        os.fsync(fd)
        os.close(fd)
        stop_here(f"{phase}:{self.key}:inside")
        return result
    return hook

for phase in ("pre_create", "post_create", "pre_terminate", "post_terminate"):
    setattr(MockLifecycleHook, phase, journalled(phase))

def wrap(name, when):
    original = getattr(Bookkeeper, name)
    def listener(self, key, plugin, phase):
        original(self, key, plugin, phase)
        stop_here(f"{phase.value}:{plugin}:{when}")
    setattr(Bookkeeper, name, listener)

wrap("note_start", "before")
wrap("note_phase", "after")

async def main():
    async with Node.open(load_host_config(config)) as node:
        print("ready", flush=True)
        for i in range(loops):
            workload = Workload.process_tree(f"w{os.getpid()}-{i}")
            try:
                record = await node.book(AgentId("agent-1"), workload, SLOTS)
            except Exception as exc:  # no room: another driver holds the devices
                await asyncio.sleep(0.005)
                continue
            driver = node.lifecycle(record)
            await driver.prepare()
            await driver.post_create()
            await driver.terminate()

asyncio.run(main())
"""


@pytest.fixture
def node(mock_node) -> Path:
    return mock_node(cpus=2, mem="1G", gpus=2)


def driver(config: Path, journal: Path, pause: str = "-", loops: int = 1) -> subprocess.Popen[str]:
    env = cli_env()
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(config), str(journal), pause, str(loops)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def journal_counts(journal: Path) -> dict[str, collections.Counter[tuple[str, str]]]:
    """Per workload, how often each (plugin, phase) ran."""
    counts: dict[str, collections.Counter[tuple[str, str]]] = collections.defaultdict(
        collections.Counter
    )
    if journal.exists():
        for line in journal.read_text().splitlines():
            workload, plugin, phase = line.split()
            counts[workload][(plugin, phase)] += 1
    return counts


@pytest.fixture
def journalled_here(monkeypatch, tmp_path):
    """Journal the hooks this process runs too (reconciliation runs post_terminate here)."""
    journal = tmp_path / "journal"
    original = MockLifecycleHook.post_terminate

    async def post_terminate(self):
        await original(self)
        with journal.open("a") as stream:
            stream.write(f"{self.workload.id} {self.key} post_terminate\n")

    monkeypatch.setattr(MockLifecycleHook, "post_terminate", post_terminate)
    return journal


def reconcile(config: Path):
    async def main():
        async with Node.open(load_host_config(config)) as opened:
            ctxs = opened.agents[AgentId("agent-1")].contexts
            used = {
                key: {
                    d: a for per in ctx.alloc_map.allocations.values() for d, a in per.items() if a
                }
                for key, ctx in ctxs.items()
            }
            return opened.last_report, used

    return asyncio.run(main())


def check_teardown(journal: Path) -> tuple[int, int]:
    """(missing, duplicate) post_terminate calls over every workload of the journal."""
    missing = duplicates = 0
    for counts in journal_counts(journal).values():
        for plugin in PLUGINS:
            done = counts[(plugin, "post_terminate")]
            started = counts[(plugin, "pre_create")] > 0
            missing += started and done == 0
            duplicates += max(0, done - 1)
    return missing, duplicates


POINTS = [f"{p}:{k}:{w}" for p in PHASES for k in PLUGINS for w in WHEN]


@pytest.mark.parametrize("point", POINTS)
def test_kill_at_every_point_of_every_hook_loses_no_post_terminate(node, journalled_here, point):
    journal = journalled_here
    process = driver(node, journal, point)
    assert process.stdout is not None
    for line in process.stdout:
        if line.strip() == "paused":
            break
    else:
        pytest.fail(f"the driver ended without pausing: {process.wait()} {process.stderr}")
    process.kill()
    process.wait()
    report, used = reconcile(node)
    missing, duplicates = check_teardown(journal)
    assert missing == 0
    phase, _plugin, when = point.split(":")
    # a second post_terminate only where the kill hit between its work and its record
    assert duplicates == (1 if (phase, when) == ("post_terminate", "inside") else 0)
    assert [t.freed for t in report.torn_down] in ([True], [])
    assert all(not amounts for amounts in used.values())
    assert Ledger(node.parent / "state").read_all() == {}


def test_without_a_crash_every_hook_gets_exactly_one_post_terminate(node, journalled_here):
    process = driver(node, journalled_here, loops=3)
    _out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    counts = journal_counts(journalled_here)
    assert len(counts) == 3
    for per in counts.values():
        assert all(per[(p, phase)] == 1 for p in PLUGINS for phase in PHASES)


def test_kills_at_random_instants_of_concurrent_writers(node, journalled_here):
    rng = random.Random(20261122)
    kills = 0
    for _round in range(8):
        drivers = [driver(node, journalled_here, loops=10_000) for _ in range(2)]
        for process in drivers:
            assert process.stdout is not None
            line = process.stdout.readline().strip()
            assert line == "ready", process.communicate()[1]
        time.sleep(rng.uniform(0.05, 0.4))
        for process in drivers:
            process.kill()
            process.wait()
            kills += 1
        report, used = reconcile(node)
        assert report.double_booked == ()
        assert report.set_aside == ()
        assert all(not amounts for amounts in used.values())
        assert Ledger(node.parent / "state").read_all() == {}
    missing, _duplicates = check_teardown(journalled_here)
    assert missing == 0
    assert kills == 16
    assert len(journal_counts(journalled_here)) > 16  # the drivers got somewhere
