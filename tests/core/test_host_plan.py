"""host.plan(): exactly the JSON shape of DESIGN §12, amounts as decimal strings."""

from __future__ import annotations

import asyncio
import json

import accelkit_mock
from accelkit.config import AgentConfig, AgentResources, AllocationMode, HostConfig, ResourceConfig
from accelkit.discovery import PluginLoader
from accelkit.host import PartitionHost
from accelkit.selection import PluginSelection
from accelkit.types import AgentId

G = 1024**3
KINDS = [
    {"key": "cpu", "devices": [{"id": str(i), "numa-node": i // 3} for i in range(5)]},
    {"key": "mem", "devices": [{"id": "root", "memory": "33G"}]},
    {"key": "cuda", "devices": [{"id": f"cuda{i}", "numa-node": i % 2} for i in range(5)]},
]


def plan_of(config: HostConfig) -> dict:
    loader = PluginLoader(PluginSelection(configs={"mock": {"kinds": KINDS}}))
    loader.register(accelkit_mock, "mock")
    loader.build()

    async def body():
        async with PartitionHost.open(config, loader=loader) as host:
            return host.plan()

    return asyncio.run(body())


def test_autosplit_plan_has_exactly_the_documented_shape():
    config = HostConfig(resource=ResourceConfig(allocation_mode=AllocationMode.AUTO_SPLIT))
    plan = plan_of(config.with_agent_count(2))
    assert plan == {
        "mode": "auto-split",
        "agents": {
            "agent-1": {
                "devices": {
                    "cpu": ["1", "2"],
                    "mem": ["root"],
                    "cuda": ["cuda0", "cuda1", "cuda2"],
                },
                "slots": {"cpu": "2", "mem": "17179869184", "cuda.device": "3"},
                "scaling": {"cpu": "0.5", "mem": "0.5", "cuda.device": "0.6"},
                "numa_nodes": [0, 1],
            },
            "agent-2": {
                "devices": {"cpu": ["3", "4"], "mem": ["root"], "cuda": ["cuda3", "cuda4"]},
                "slots": {"cpu": "2", "mem": "17179869184", "cuda.device": "2"},
                "scaling": {"cpu": "0.5", "mem": "0.5", "cuda.device": "0.4"},
                "numa_nodes": [0, 1],
            },
        },
        "reserved": {"cpu": "1", "mem": "1073741824"},
        "unassigned": {"cpu": [], "cuda": []},
        # cores 0-2 sit on node 0, 3-4 on node 1; cuda devices alternate between the nodes
        "warnings": [
            "agent 'agent-1': accelerators on NUMA node(s) 1, but its cpu cores on 0",
            "agent 'agent-2': accelerators on NUMA node(s) 0, but its cpu cores on 1",
        ],
    }
    assert json.loads(json.dumps(plan)) == plan  # plain JSON data only
    assert list(plan) == ["mode", "agents", "reserved", "unassigned", "warnings"]


def test_shared_plan_scales_by_one():
    plan = plan_of(HostConfig().with_agent_count(3))
    assert plan["mode"] == "shared"
    for agent in plan["agents"].values():
        assert agent["scaling"] == {"cpu": "1", "mem": "1", "cuda.device": "1"}
        assert agent["slots"] == {"cpu": "4", "mem": str(32 * G), "cuda.device": "5"}


def test_three_agents_share_five_gpus_as_two_two_one():
    config = HostConfig(resource=ResourceConfig(allocation_mode=AllocationMode.AUTO_SPLIT))
    plan = plan_of(config.with_agent_count(3))
    factors = [a["scaling"]["cuda.device"] for a in plan["agents"].values()]
    assert factors == ["0.4", "0.4", "0.2"]


def test_manual_plan_lists_unassigned_devices_and_warns():
    config = HostConfig(
        resource=ResourceConfig(allocation_mode=AllocationMode.MANUAL, reserved_cpu=("4",)),
        agents=(
            AgentConfig(
                AgentId("x"), AgentResources(("0", "2"), 8 * G, {"cuda": ("cuda3", "cuda1")})
            ),
            AgentConfig(AgentId("y"), AgentResources(("3",), 4 * G, {})),
        ),
    )
    plan = plan_of(config)
    assert plan["mode"] == "manual"
    assert plan["agents"]["x"]["devices"] == {
        "cpu": ["0", "2"],
        "mem": ["root"],
        "cuda": ["cuda1", "cuda3"],
    }
    assert plan["agents"]["y"]["devices"]["cuda"] == []
    assert plan["agents"]["y"]["slots"] == {"cpu": "1", "mem": str(4 * G), "cuda.device": "0"}
    assert plan["agents"]["y"]["scaling"]["cuda.device"] == "0"
    assert plan["agents"]["x"]["scaling"]["mem"] == "0.25"
    assert plan["unassigned"] == {"cpu": ["1"], "cuda": ["cuda0", "cuda2", "cuda4"]}
    assert plan["reserved"] == {"cpu": "1", "mem": str(G)}
    assert plan["agents"]["x"]["numa_nodes"] == [0, 1]
    assert plan["agents"]["y"]["numa_nodes"] == [1]
    assert plan["warnings"] == [
        "cpu device(s) assigned to no agent: '1'",
        "cuda device(s) assigned to no agent: 'cuda0', 'cuda2', 'cuda4'",
        # x's cores 0 and 2 sit on node 0, its cuda1 and cuda3 on node 1
        "agent 'x': accelerators on NUMA node(s) 1, but its cpu cores on 0",
    ]
