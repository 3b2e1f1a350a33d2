"""The partition host and the agents' views of the node (DESIGN §8)."""

from __future__ import annotations

from accelkit.host.agent import AgentView, allocation_order, plugin_key_of
from accelkit.host.host import PartitionHost
from accelkit.host.plan import build_plan

__all__ = ["AgentView", "PartitionHost", "allocation_order", "build_plan", "plugin_key_of"]
