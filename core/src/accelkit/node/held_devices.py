"""Devices held under another partition: a live record whose devices another agent has now.

The ledger holds each booking's devices by plugin and device id, node-wide. When the node is
opened with another partition than the one a live record was booked under (another config, an
agent added or removed, another mode), a device the record holds may now fall to another agent,
or to none. The device stays held (:mod:`accelkit.workload.node_wide` takes it in the map of
whichever agent has it now), and this module says so: ``run``, ``status`` and the other commands
that open the node warn, ``check`` and ``plan`` name each such device with its holder and both
agents, and a run refused for lack of room names them too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from accelkit.errors import ConfigError
from accelkit.host import AgentView, PartitionHost
from accelkit.partition import natural_sort_key
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import AgentId, DeviceId, DeviceName
from accelkit.workload.config_seen import config_digest, note_config
from accelkit.workload.ledger import Ledger
from accelkit.workload.record import LedgerRecord

RecordKey = tuple[AgentId, str]

__all__ = [
    "Held",
    "HeldElsewhere",
    "Masks",
    "held_elsewhere",
    "holdings_of",
    "masks_of",
    "partition_notes",
    "read_only_notes",
]

#: per plugin, each agent's devices
Masks = Mapping[DeviceName, Mapping[AgentId, frozenset[DeviceId]]]


@attrs.frozen(repr=False)
class HeldElsewhere:
    """A device a live record holds that this partition gives to other agents (or none)."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    plugin: DeviceName
    device_id: DeviceId
    workload_id: str
    holder: AgentId
    #: the agents that have the device in this partition (none: unassigned or reserved)
    now: tuple[AgentId, ...]

    def message(self) -> str:
        """One line for the operator: device, holder, both agents, what happens."""
        if self.now:
            agents = " and ".join(repr(a) for a in self.now)
            given = f"this config gives it to agent {agents}"
        else:
            given = "this config gives it to no agent"
        return (
            f"device {self.plugin} {self.device_id} is held by workload {self.workload_id!r} "
            f"of agent {self.holder!r}, booked under another partition; {given}: it stays "
            "held, granted to nobody, until that workload ends"
        )


def masks_of(agents: Mapping[AgentId, AgentView]) -> Masks:
    """The masks of a started host's agents (``host.agents``)."""
    masks: dict[DeviceName, dict[AgentId, frozenset[DeviceId]]] = {}
    for agent_id, view in agents.items():
        for key, ctx in view.contexts.items():
            masks.setdefault(key, {})[agent_id] = frozenset(ctx.device_mask)
    return masks


#: (agent, workload id, plugin, device) of one device a booking holds
Held = tuple[AgentId, str, DeviceName, DeviceId]


def holdings_of(records: Iterable[LedgerRecord]) -> list[Held]:
    """The devices ``records`` hold (amounts above zero)."""
    return [
        (record.agent_id, record.workload.id, plugin, device)
        for record in records
        for plugin, alloc in record.allocation.items()
        for per_device in alloc.values()
        for device, amount in per_device.items()
        if amount
    ]


def held_elsewhere(holdings: Iterable[Held], masks: Masks) -> list[HeldElsewhere]:
    """Every held device that its booking's agent does not have in ``masks``, once each.

    Plugins that ``masks`` lacks are left out (this node does not load them: nobody here can
    be granted their devices).
    """
    found: dict[tuple[DeviceName, DeviceId, AgentId, str], HeldElsewhere] = {}
    for agent_id, workload_id, plugin, device in holdings:
        per_agent = masks.get(plugin)
        if per_agent is None or device in per_agent.get(agent_id, frozenset()):
            continue
        now = tuple(a for a, mask in per_agent.items() if device in mask)
        found[(plugin, device, agent_id, workload_id)] = HeldElsewhere(
            plugin, device, workload_id, agent_id, now
        )
    return sorted(
        found.values(), key=lambda h: (h.plugin, natural_sort_key(h.device_id), h.workload_id)
    )


def partition_notes(
    ledger: Ledger, host: PartitionHost, live: Mapping[RecordKey, LedgerRecord]
) -> list[str]:
    """What a node opened on ``config`` tells the operator about the ledger's partition: the
    config the ledger was last opened with when it differs (that one is recorded now), and
    each device of this node that the ``live`` records (as the opening reconciliation read
    and applied them) hold and this partition gives to another agent (or to none)."""
    seen = config_digest(host.config)
    before = note_config(ledger, seen)
    lines = [line] if before is not None and (line := before.differs(seen)) else []
    masks = masks_of(host.agents)
    devices = {key: frozenset(host.device_map[key].device_ids) for key in masks}
    # an agent that has every device of the node (a shared node's) holds none elsewhere:
    # its records, thousands maybe, need no look
    whole = {
        a for a in host.agents if all(m.get(a, frozenset()) >= devices[k] for k, m in masks.items())
    }
    # the devices of this node that a record's own agent lacks (few, most often none)
    elsewhere = [
        h
        for h in holdings_of(r for r in live.values() if r.agent_id not in whole)
        if h[3] in devices.get(h[2], ()) and h[3] not in masks[h[2]].get(h[0], ())
    ]
    plugins = {key: index for index, key in enumerate(masks)}
    elsewhere.sort(key=lambda h: (plugins[h[2]], h[3], h[0], h[1]))  # as the device index
    return lines + [h.message() for h in held_elsewhere(elsewhere, masks)]


def _gone(record: LedgerRecord) -> bool:
    """Whether the record's workload is gone by its process stamps (no runtime asked)."""
    if record.owner is not None and record.owner.is_running():
        return False
    if record.leader is not None:
        return not record.leader.is_running()
    return record.workload.type.value == "process_tree"  # never got a leader, nobody runs it


def read_only_notes(host: PartitionHost) -> list[str]:
    """The devices live bookings hold that ``host``'s partition gives to another agent, read
    only (for ``check`` and ``plan``): nothing is recorded, no runtime is asked (records of
    workloads whose processes are gone are left out). Which config the ledger was last
    opened with is said by the commands that open it, not here: a check is no opening."""
    ledger = Ledger(host.config.resource.state_dir, source=host.config.source_name)
    try:
        records = ledger.read_all()
    except ConfigError as exc:
        return [f"cannot read the ledger to compare its bookings with this partition: {exc}"]
    live = [r for r in records.values() if not _gone(r)]
    return [h.message() for h in held_elsewhere(holdings_of(live), masks_of(host.agents))]
