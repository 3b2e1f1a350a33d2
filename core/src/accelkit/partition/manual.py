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
)
from accelkit.partition.ordering import natural_sort_key
from accelkit.partition.problems import ProblemList, listing
from accelkit.partition.reserve import CPU, MEM, Reservation
from accelkit.partition.scaling import plain_amounts as _plain
from accelkit.sizes import format_binary_size
from accelkit.types import AgentId, DeviceId, DeviceName, SlotName


class ManualAssigner:
    """Checks every agent's resources against the discovered devices, collecting problems."""

    def __init__(
        self, device_map: GlobalDeviceMap, reservation: Reservation, problems: ProblemList
    ) -> None:
        self.device_map = device_map
        self.reservation = reservation
        self.problems = problems
        #: who holds each device so far, per device name (reserved cores count as held)
        self._owners: dict[DeviceName, dict[DeviceId, str]] = {}
        if reservation.cpu:
            self._owners[CPU] = dict.fromkeys(reservation.cpu, "")

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
                parts[CPU] = self._devices(agent.id, CPU, resources.cpu, f"{key}.cpu")
            elif CPU in self.device_map:
                msg = 'missing \'cpu\': list the agent\'s cpu core ids, e.g. cpu = ["0", "1"]'
                self.problems.add(f"{key}.cpu", msg, agent.id)
            for name, ids in resources.devices.items():
                parts[DeviceName(name)] = self._devices(
                    agent.id, DeviceName(name), ids, f"{key}.devices.{name}"
                )
            if resources.mem is not None:
                mem_given += resources.mem
                parts[MEM] = self._memory(agent.id, resources.mem, f"{key}.mem")
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
        info = self.device_map.get(MEM)
        if info is None:
            return None
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
            what = "cpu core" if name == CPU else f"{name} device"
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

    def _memory(self, agent: AgentId, amount: int, key: str) -> Partition:
        info = self.device_map.get(MEM)
        if info is None:
            known = sorted(self.device_map)
            msg = f"unknown device name 'mem': no memory plugin (the node has: {listing(known)})"
            self.problems.add(key, msg, agent)
            return SlotPartition({})
        return SlotPartition({SlotName("mem"): amount}, info.device_ids)


def _conflict(name: DeviceName, device_id: DeviceId, owner: str, agent: str) -> str:
    if not owner:
        return f"cpu core {device_id!r} is reserved by resource.reserved-cpu"
    if owner == agent:
        return f"device id {device_id!r} of {name!r} is listed twice"
    return f"device id {device_id!r} of {name!r} is also given to agent {owner!r}"
