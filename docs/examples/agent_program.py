"""An agent program: open the node, book a container workload, drive its lifecycle.

Run it with a host config: ``python docs/examples/agent_program.py docs/examples/demo.toml``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from decimal import Decimal

from accelkit.config import load_host_config
from accelkit.host import AgentView
from accelkit.node import Node
from accelkit.runtime.render.docker import render_docker_create
from accelkit.types import AgentId, SlotName, Workload


def free_slots(agent: AgentView) -> dict[str, str]:
    """What the agent can still allocate, per slot."""
    return {
        slot: str(amount)
        for ctx in agent.contexts.values()
        for slot, amount in ctx.alloc_map.allocatable().items()
    }


async def main(config_path: str) -> None:
    config = load_host_config(config_path)
    # Opening the node loads the plugins, splits the devices among the agents and
    # reconciles the allocation ledger (workloads a crashed agent left behind).
    async with Node.open(config) as node:
        agent = node.agents[AgentId("agent-1")]
        print("devices:", agent.device_ids())
        print("capacity:", agent.available_slots())
        print("scaling:", agent.scaling_factors())

        # Book: allocate across plugins (accelerators, then cpu, then mem) and record it.
        slots = {SlotName("cuda.device"): Decimal(1), SlotName("cpu"): Decimal(2)}
        record = await node.book(agent.agent_id, Workload.container("job-42"), slots)
        print("granted:", record.allocation)
        print("free while it runs:", free_slots(agent))

        lifecycle = node.lifecycle(record)
        merged = await lifecycle.prepare()  # every plugin's pre_create, merged and checked
        body = render_docker_create(merged)  # the POST /containers/create fragment
        print("container body:", json.dumps(body, sort_keys=True))
        await lifecycle.post_create()
        # ... the container runs ...
        await lifecycle.terminate()  # pre_terminate, post_terminate, then the devices are freed
        print("free again:", free_slots(agent))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
