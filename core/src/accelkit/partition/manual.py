"""MANUAL mode: the devices and memory each agent's ``[agents.resource]`` names, validated."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from accelkit.config.model import AgentConfig
from accelkit.partition.model import (
    DevicePartition,
    GlobalDeviceMap,
    Partition,
    SlotPartition,
    provider,
)
from accelkit.partition.ordering import natural_sort_key
from accelkit.partition.problems import ProblemList, listing
from accelkit.partition.reserve import Reservation
from accelkit.partition.scaling import plain_amounts as _plain
from accelkit.plugin import PluginRole
from accelkit.sizes import format_binary_size
from accelkit.types import AgentId, DeviceId, DeviceName

#: what to write instead of ``devices = { <key> = [...] }`` for the cores and memory plugins
_OWN_KEY = {
    PluginRole.CORES: "the cores plugin: list the agent's cores as 'cpu'",
    PluginRole.MEMORY: "the memory plugin, split by amount: give the agent's amount as 'mem'",
}


class ManualAssigner:
    """Checks every agent's resources against the discovered devices, collecting problems.

    ``cpu`` names devices of the cores plugin and ``mem`` an amount of the memory plugin,
    whatever their keys (see :class:`~accelkit.plugin.PluginRole`).
    """

    def __init__(
        self, device_map: GlobalDeviceMap, reservation: Reservation, problems: ProblemList
    ) -> None:
        self.device_map = device_map
        self.reservation = reservation
        self.problems = problems
        #: the device names of the cores and the memory plugin (``None``: the node has none)
        self._cores = provider(device_map, PluginRole.CORES)
        self._memory_name = provider(device_map, PluginRole.MEMORY)
        #: who holds each device so far, per device name (reserved cores count as held)
        self._owners: dict[DeviceName, dict[DeviceId, str]] = {}
        if reservation.cpu and self._cores is not None:
            self._owners[self._cores] = dict.fromkeys(reservation.cpu, "")

    def assign(self, agents: Sequence[AgentConfig]) -> dict[AgentId, dict[DeviceName, Partition]]:
        """Every agent's partitions; problems go to the problem list."""
        result: dict[AgentId, dict[DeviceName, Partition]] = {}
        mem_left = self._mem_left()
        mem_given = 0
        over_reported = False
        for index, agent in enumerate(agents):
            where = f"agents[{index}]"
            parts = self._empty_partitions()
            resources = agent.resource
            if resources is None:
                msg = "allocation-mode 'manual' needs the agent's [agents.resource]"
                self.problems.add(f"{where}.resource", msg, agent.id)
                result[agent.id] = parts
                continue
            key = f"{where}.resource"
            if resources.cpu is not None:
                self._cpu(agent.id, resources.cpu, f"{key}.cpu", parts)
            elif self._cores is not None:
                msg = 'missing \'cpu\': list the agent\'s cpu core ids, e.g. cpu = ["0", "1"]'
                self.problems.add(f"{key}.cpu", msg, agent.id)
            for name, ids in resources.devices.items():
                at = f"{key}.devices.{name}"
                if (info := self.device_map.get(DeviceName(name))) is not None and (
                    instead := _OWN_KEY.get(info.role)
                ):
                    msg = f"{name!r} is {instead} under [agents.resource], not in devices"
                    self.problems.add(at, msg, agent.id)
                    continue
                parts[DeviceName(name)] = self._devices(agent.id, DeviceName(name), ids, at)
            if resources.mem is not None:
                mem_given += resources.mem
                self._memory(agent.id, resources.mem, f"{key}.mem", parts)
                if mem_left is not None and mem_given > mem_left and not over_reported:
                    msg = (
                        f"memory over-subscribed: the agents' mem adds up to "
                        f"{format_binary_size(mem_given)} so far, but only "
                        f"{format_binary_size(mem_left)} is left after reserved-mem"
                    )
                    self.problems.add(f"{key}.mem", msg, agent.id)
                    over_reported = True  # once is enough; later agents add nothing new
            result[agent.id] = parts
        return result

    def unassigned(self) -> dict[DeviceName, tuple[DeviceId, ...]]:
        """Devices split by device that no agent holds (reserved cores excluded)."""
        free: dict[DeviceName, tuple[DeviceId, ...]] = {}
        for name, info in self.device_map.items():
            if info.shared_by_amount:
                continue
            held = self._owners.get(name, {})
            ids = [d for d in info.device_ids if d not in held]
            free[name] = tuple(sorted(ids, key=natural_sort_key))
        return free

    def _empty_partitions(self) -> dict[DeviceName, Partition]:
        parts: dict[DeviceName, Partition] = {}
        for name, info in self.device_map.items():
            if info.shared_by_amount:
                slots = {i.slot_name: Decimal(0) for i in info.device_slots.values()}
                parts[name] = SlotPartition(_plain(slots), info.device_ids)
            else:
                parts[name] = DevicePartition(())
        return parts

    def _mem_left(self) -> int | None:
        if self._memory_name is None:
            return None
        info = self.device_map[self._memory_name]
        total = sum((i.amount for i in info.device_slots.values()), Decimal(0))
        return int(total) - self.reservation.mem

    def _devices(
        self, agent: AgentId, name: DeviceName, ids: Sequence[str], key: str
    ) -> DevicePartition:
        info = self.device_map.get(name)
        if info is None:
            known = sorted(n for n, i in self.device_map.items() if not i.shared_by_amount)
            msg = f"unknown device name {name!r} (the node has: {listing(known)})"
            self.problems.add(key, msg, agent)
            return DevicePartition(())
        if info.shared_by_amount:
            msg = f"{name!r} is split by amount; give an amount, not device ids"
            self.problems.add(key, msg, agent)
            return DevicePartition(())
        if not ids:
            what = "cpu core" if info.role is PluginRole.CORES else f"{name} device"
            self.problems.add(key, f"an empty list gives the agent no {what}; list ids", agent)
        known_ids = set(info.device_ids)
        owners = self._owners.setdefault(name, {})
        taken: list[DeviceId] = []
        for raw in ids:
            device_id = DeviceId(raw)
            if device_id not in known_ids:
                ordered = sorted(known_ids, key=natural_sort_key)
                msg = f"unknown device id {raw!r} of {name!r} (the node has: {listing(ordered)})"
                self.problems.add(key, msg, agent)
            elif (owner := owners.get(device_id)) is not None:
                self.problems.add(key, _conflict(name, device_id, owner, agent), agent)
            else:
                owners[device_id] = agent
                taken.append(device_id)
        return DevicePartition(sorted(taken, key=natural_sort_key))

    def _cpu(
        self, agent: AgentId, ids: Sequence[str], key: str, parts: dict[DeviceName, Partition]
    ) -> None:
        """``cpu = [...]``: devices of the cores plugin."""
        if self._cores is None:
            known = sorted(n for n, i in self.device_map.items() if not i.shared_by_amount)
            msg = f"unknown device name 'cpu': no cores plugin (the node has: {listing(known)})"
            self.problems.add(key, msg, agent)
            return
        parts[self._cores] = self._devices(agent, self._cores, ids, key)

    def _memory(
        self, agent: AgentId, amount: int, key: str, parts: dict[DeviceName, Partition]
    ) -> None:
        """``mem = "32G"``: an amount of the memory plugin's slot ``mem``."""
        slot = PluginRole.MEMORY.bare_slot
        if self._memory_name is None or slot is None:
            known = sorted(self.device_map)
            msg = f"unknown device name 'mem': no memory plugin (the node has: {listing(known)})"
            self.problems.add(key, msg, agent)
            return
        info = self.device_map[self._memory_name]
        parts[self._memory_name] = SlotPartition({slot: amount}, info.device_ids)


def _conflict(name: DeviceName, device_id: DeviceId, owner: str, agent: str) -> str:
    if not owner:
        return f"cpu core {device_id!r} is reserved by resource.reserved-cpu"
    if owner == agent:
        return f"device id {device_id!r} of {name!r} is listed twice"
    return f"device id {device_id!r} of {name!r} is also given to agent {owner!r}"
