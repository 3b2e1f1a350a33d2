"""Records booked under another partition hold their devices in whichever map has them now.

Each test writes the records another process would have written under another config (an
agent this config lacks, or a device that now falls to another agent), opens a node on the
same ledger and checks the maps, the refusals, what the node says, and that the devices are
freed where they were taken once the records go.
"""

from __future__ import annotations

import asyncio
import os
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.config import load_host_config
from accelkit.errors import InsufficientResource
from accelkit.node import Node
from accelkit.node.held_devices import HeldElsewhere, held_elsewhere
from accelkit.types import AgentId, DeviceName, SlotName, Workload
from accelkit.workload import Ledger, LedgerRecord, ProcessStamp

ALIVE = ProcessStamp.of(os.getpid())
G = 1024**3

CONFIG = """\
[resource]
allocation-mode = "{mode}"
reserved-cpu = 0
reserved-mem = "0"
memory-align-size = "1G"
state-dir = "{state}"
[plugins]
allowed = ["mock"]
[plugins.config.mock]
config-file = "devices.toml"
"""


@pytest.fixture
def write(tmp_path: Path, mock_node):
    mock_node(cpus=2, mem="4G", gpus=4)  # devices.toml

    def config(name: str, mode: str, agents: list[str], extra: str = "") -> Path:
        path = tmp_path / name
        text = CONFIG.format(mode=mode, state=tmp_path / "state") + extra
        text += "".join(f'[[agents]]\nagent = {{ id = "{a}" }}\n' for a in agents)
        path.write_text(text)
        return path

    return config


def held(agent: str, workload: str, **devices: dict[str, dict[str, int]]) -> LedgerRecord:
    """A live record (this test process leads it) of ``agent`` holding ``devices``."""
    allocation = {
        DeviceName(plugin): {
            SlotName(slot): {d: Decimal(a) for d, a in per.items()} for slot, per in slots.items()
        }
        for plugin, slots in devices.items()
    }
    return LedgerRecord(
        AgentId(agent), Workload.process_tree(workload), allocation, tuple(allocation), leader=ALIVE
    )


def used(node: Node, agent: str, plugin: str) -> dict[str, Decimal]:
    ctx = node.agents[AgentId(agent)].contexts[DeviceName(plugin)]
    return {
        d: a
        for per in ctx.alloc_map.allocations.values()
        for d, a in per.items()
        if a and d in ctx.device_mask
    }


def opened(path: Path, body):
    async def main():
        async with Node.open(load_host_config(path), sweep=False) as node:
            return await body(node)

    return asyncio.run(main())


def _held_elsewhere(device: str, workload: str, holder: str, given_to: str) -> str:
    """The warning about a device held by a workload booked under another partition."""
    return (
        f"ledger: device cuda {device} is held by workload {workload!r} of agent {holder!r}, "
        f"booked under another partition; this config gives it to agent {given_to!r}: it stays "
        "held, granted to nobody, until that workload ends"
    )


async def _partition_warnings(node: Node) -> list[str]:
    return [p for p in node.warnings if "another partition" in p]


def test_a_gpu_of_an_agent_added_since_is_taken_in_its_map(write):
    three = write("three.toml", "auto-split", ["agent-1", "agent-2", "agent-3"])
    Ledger(three.parent / "state").write(
        held("agent-2", "old", cuda={"cuda.device": {"cuda2": 1, "cuda3": 1}})
    )

    async def body(node: Node):
        assert used(node, "agent-2", "cuda") == {"cuda2": 1}
        assert used(node, "agent-3", "cuda") == {"cuda3": 1}
        with pytest.raises(InsufficientResource, match="'old' of agent 'agent-2' \\(cuda3=1\\)"):
            await node.book(AgentId("agent-3"), Workload.process_tree("new"), {"cuda.device": 1})
        [line] = await _partition_warnings(node)
        assert line == _held_elsewhere("cuda3", "old", "agent-2", "agent-3")
        ledger = node.bookkeeper.ledger
        ledger.remove(AgentId("agent-2"), "old")  # another process finished it
        record = await node.book(
            AgentId("agent-3"), Workload.process_tree("new"), {SlotName("cuda.device"): 1}
        )
        assert record.allocation[DeviceName("cuda")] == {"cuda.device": {"cuda3": 1}}
        assert used(node, "agent-2", "cuda") == {}

    opened(three, body)


def test_an_agent_this_config_lacks_holds_its_devices_in_the_shared_map(write):
    shared = write("shared.toml", "shared", [])
    Ledger(shared.parent / "state").write(
        held("a2", "w", cpu={"cpu": {"1": 1}}, mem={"mem": {"root": 3 * G}})
    )

    async def body(node: Node):
        assert used(node, "agent-1", "cpu") == {"1": 1}
        assert used(node, "agent-1", "mem") == {"root": 3 * G}
        with pytest.raises(InsufficientResource):
            await node.book(AgentId("agent-1"), Workload.process_tree("x"), {"mem": 2 * G})
        record = await node.book(AgentId("agent-1"), Workload.process_tree("y"), {"cpu": 1})
        assert record.allocation[DeviceName("cpu")] == {"cpu": {"0": 1}}

    opened(shared, body)


def test_memory_of_an_unknown_agent_goes_to_a_share_that_holds_it(write):
    split = write("split.toml", "auto-split", ["agent-1", "agent-2"])  # 2G of memory each
    Ledger(split.parent / "state").write(held("gone", "w", mem={"mem": {"root": G}}))

    async def body(node: Node):
        assert used(node, "agent-1", "mem") == {"root": G}
        assert used(node, "agent-2", "mem") == {}
        with pytest.raises(InsufficientResource):
            await node.book(AgentId("agent-1"), Workload.process_tree("x"), {"mem": 2 * G})
        ledger = node.bookkeeper.ledger
        ledger.remove(AgentId("gone"), "w")
        await node.book(AgentId("agent-1"), Workload.process_tree("x"), {"mem": 2 * G})
        assert used(node, "agent-1", "mem") == {"root": 2 * G}

    opened(split, body)


def test_a_dead_record_of_an_unknown_agent_is_finished_and_frees_its_devices(write):
    shared = write("shared.toml", "shared", [])
    dead = held("a2", "gone", cuda={"cuda.device": {"cuda0": 1}})
    dead = LedgerRecord(
        dead.agent_id, dead.workload, dead.allocation, dead.order, leader=ProcessStamp(1, "0")
    )
    Ledger(shared.parent / "state").write(dead)

    async def body(node: Node):
        assert [t.workload_id for t in node.last_report.torn_down] == ["gone"]
        assert used(node, "agent-1", "cuda") == {}
        assert node.bookkeeper.ledger.read_all() == {}

    opened(shared, body)


def test_the_node_names_the_config_the_ledger_was_last_opened_with(write):
    first = write("first.toml", "shared", [])
    second = write("second.toml", "auto-split", ["agent-1", "agent-2"])
    commented = write("commented.toml", "auto-split", ["agent-1", "agent-2"], extra="# a note\n")

    def notes(path: Path) -> list[str]:
        async def body(node: Node) -> list[str]:
            return [p for p in node.warnings if "another config" in p]

        return opened(path, body)

    assert notes(first) == []
    [line] = notes(second)
    assert f"last opened with another config ({first}, digest " in line
    assert f"than this command reads ({second}, digest " in line
    assert notes(second) == []
    assert notes(commented) == []  # a comment does not change the partition


def test_held_elsewhere_names_devices_no_agent_has():
    masks = {DeviceName("cuda"): {AgentId("agent-1"): frozenset({"cuda0"})}}
    holdings = [
        (AgentId("agent-1"), "a", DeviceName("cuda"), "cuda0"),
        (AgentId("agent-2"), "b", DeviceName("cuda"), "cuda1"),
        (AgentId("agent-2"), "b", DeviceName("tpu"), "tpu0"),  # a plugin this node lacks
    ]
    [found] = held_elsewhere(holdings, masks)
    assert found == HeldElsewhere(DeviceName("cuda"), "cuda1", "b", AgentId("agent-2"), ())
    assert "this config gives it to no agent" in found.message()


def test_a_view_is_kept_while_the_node_has_the_same_plugins():
    """Each record's agent is looked up once per record: its view is made once, and made
    again when the node's plugins change (a rediscovery that adds or drops one)."""
    from types import SimpleNamespace

    from accelkit.workload.node_wide import NodeWideAgents

    live = {AgentId("a"): SimpleNamespace(contexts={DeviceName("cpu"): object()})}
    agents = NodeWideAgents(live)  # type: ignore[arg-type]
    first = agents[AgentId("a")]
    assert agents[AgentId("a")] is first
    assert agents[AgentId("other")] is not first  # an agent this node lacks has its own
    live[AgentId("a")] = SimpleNamespace(
        contexts={DeviceName("cpu"): object(), DeviceName("cuda"): object()}
    )
    again = agents[AgentId("a")]
    assert again is not first
    assert list(again.contexts) == ["cpu", "cuda"]
    del live[AgentId("a")].contexts[DeviceName("cuda")]
    assert list(agents[AgentId("a")].contexts) == ["cpu"]


@pytest.mark.parametrize("whole", [True, False], ids=["own-agent-whole", "part-by-part"])
def test_records_of_the_agent_that_has_their_devices_apply_whole_alike(write, monkeypatch, whole):
    """A record whose devices its own agent has is taken whole in that agent's map; the maps,
    the double bookings and what freeing does are as when it is placed part by part."""
    from accelkit.workload import node_wide

    if not whole:
        monkeypatch.setattr(node_wide, "_held_within", lambda alloc, mask: False)
    split = write("split.toml", "auto-split", ["agent-1", "agent-2"])  # cuda0-1 | cuda2-3
    ledger = Ledger(split.parent / "state")
    ledger.write(held("agent-1", "own", cuda={"cuda.device": {"cuda0": 1}}, cpu={"cpu": {"0": 1}}))
    ledger.write(held("agent-1", "zero", cuda={"cuda.device": {"cuda1": 1, "cuda2": 0}}))
    ledger.write(held("agent-1", "both", cuda={"cuda.device": {"cuda0": 1}}))  # double booked
    # agent-1's cuda1 is taken: refused whole, cuda3 of its own agent left free
    ledger.write(held("agent-2", "elsewhere", cuda={"cuda.device": {"cuda1": 1, "cuda3": 1}}))
    ledger.write(held("agent-2", "moved", cpu={"cpu": {"0": 0, "1": 1}}))

    async def body(node: Node):
        maps = {(a, p): used(node, a, p) for a in ("agent-1", "agent-2") for p in ("cpu", "cuda")}
        assert maps == {
            ("agent-1", "cpu"): {"0": 1},
            ("agent-1", "cuda"): {"cuda0": 1, "cuda1": 1},
            ("agent-2", "cpu"): {"1": 1},
            ("agent-2", "cuda"): {},
        }
        assert sorted(w for w in node.warnings if "beyond its capacity" in w) == [
            "ledger: device 'cuda0' (cuda.device) of agent 'agent-1' is booked beyond its "
            "capacity 1: own holds 1, both holds 1",
            "ledger: device 'cuda1' (cuda.device) of agent 'agent-2' is booked beyond its "
            "capacity 1: zero holds 1, elsewhere holds 1",
        ]
        for key in list(node.bookkeeper.ledger.read_all()):
            node.bookkeeper.ledger.remove(*key)
        await node.bookkeeper.reconcile()
        assert all(used(node, a, p) == {} for a, p in maps)

    opened(split, body)


def test_the_opening_notes_come_from_the_records_it_applied_without_the_index(write, monkeypatch):
    """Devices held under another partition are found in the records the opening
    reconciliation read; the device index is not read again for them."""

    def refused(*_args: object) -> None:
        raise AssertionError("the device index was read")

    three = write("three.toml", "auto-split", ["agent-1", "agent-2", "agent-3"])
    Ledger(three.parent / "state").write(
        held("agent-2", "old", cuda={"cuda.device": {"cuda2": 1, "cuda3": 1, "cuda9": 1}})
    )
    monkeypatch.setattr(Ledger, "holders", refused)

    # cuda9 is no device of this node: nobody here can be granted it, nothing to say
    assert opened(three, _partition_warnings) == [
        _held_elsewhere("cuda3", "old", "agent-2", "agent-3")
    ]


def test_records_of_an_agent_with_every_device_are_not_looked_through(write, monkeypatch):
    """A shared node's one agent has every device: its records hold nothing elsewhere and
    are not looked through; a record of an agent this config lacks still is, and named."""
    from accelkit.node import held_devices

    looked: list[str] = []
    holdings_of = held_devices.holdings_of

    def spying(records):
        records = list(records)
        looked.extend(r.workload.id for r in records)
        return holdings_of(records)

    monkeypatch.setattr(held_devices, "holdings_of", spying)
    shared = write("shared.toml", "shared", [])
    ledger = Ledger(shared.parent / "state")
    ledger.write(held("agent-1", "mine", cuda={"cuda.device": {"cuda0": 1}}))
    ledger.write(held("a2", "theirs", cuda={"cuda.device": {"cuda1": 1}}))

    assert opened(shared, _partition_warnings) == [
        _held_elsewhere("cuda1", "theirs", "a2", "agent-1")
    ]
    assert looked == ["theirs"]
