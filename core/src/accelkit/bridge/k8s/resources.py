"""Which extended resources an agent offers the kubelet, and their devices as the kubelet sees them.

Every *whole* accelerator slot (its alloc map's ``whole_slots``: whole GPUs, and MIG-like
profiles as resources of their own) becomes ``<domain>/<slot>``, e.g.
``accelkit.io/cuda.device``: the kubelet counts extended resources in whole devices and books
each device it hands out entirely. Divisible slots (GPU shares) are not offered here, they
reach Kubernetes through the DRA driver; the cores and memory plugins (by their role) are
left to the kubelet's own CPU and memory managers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal

import attrs

from accelkit.health import DeviceHealth
from accelkit.host import AgentView
from accelkit.partition import natural_sort_key
from accelkit.plugin import PluginRole
from accelkit.types import DeviceAllocation, DeviceId, DeviceName, SlotName

__all__ = ["HEALTHY", "UNHEALTHY", "K8sDevice", "K8sResource", "k8s_resources"]

#: the kubelet's two health words
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@attrs.frozen
class K8sDevice:
    """One device of a resource as ``ListAndWatch`` reports it."""

    device_id: DeviceId
    amount: Decimal
    numa_node: int | None
    health: str = HEALTHY


@attrs.frozen
class K8sResource:
    """One extended resource: a whole-device slot of one plugin of the agent."""

    name: str
    plugin: DeviceName
    slot: SlotName

    @property
    def socket_name(self) -> str:
        """The plugin's socket file in the device-plugins directory."""
        return "accelkit-" + _UNSAFE.sub("_", self.name.replace("/", "_")) + ".sock"

    def workload_id(self, device_ids: list[str]) -> str:
        """The ledger's workload id of one container's devices: ``k8s:<resource>:<ids>``."""
        return f"k8s:{self.name}:{','.join(sorted(device_ids, key=natural_sort_key))}"

    def devices(self, agent: AgentView, health: Mapping[DeviceId, DeviceHealth]) -> list[K8sDevice]:
        """The agent's devices of this slot now, with the kubelet's health word."""
        ctx = agent.contexts.get(self.plugin)
        if ctx is None:
            return []
        found = [
            K8sDevice(
                device_id,
                info.amount,
                info.numa_node,
                HEALTHY
                if health.get(device_id) is None or health[device_id].allocatable
                else UNHEALTHY,
            )
            for device_id, info in ctx.alloc_map.device_slots.items()
            if info.slot_name == self.slot
        ]
        return sorted(found, key=lambda d: natural_sort_key(d.device_id))

    def allocation(self, devices: list[K8sDevice]) -> dict[DeviceName, DeviceAllocation]:
        """The ledger allocation of ``devices``: each whole."""
        return {self.plugin: {self.slot: {d.device_id: d.amount for d in devices}}}


def k8s_resources(agent: AgentView, domain: str) -> list[K8sResource]:
    """The extended resources of ``agent`` under ``domain``, in the agent's plugin order."""
    found: list[K8sResource] = []
    for key, ctx in agent.contexts.items():
        if ctx.plugin.role is not PluginRole.ACCELERATOR:  # the kubelet manages cores, memory
            continue
        whole = ctx.alloc_map.whole_slots  # a divisible slot booked whole would waste it
        slots = sorted(
            {i.slot_name for i in ctx.alloc_map.device_slots.values() if i.slot_name in whole},
            key=natural_sort_key,
        )
        found += [K8sResource(f"{domain}/{slot}", key, slot) for slot in slots]
    return found
