"""Starting a plugin and giving an agent part of its devices, as the conformance checks need."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from decimal import Decimal

import attrs
import pytest

from accelkit.errors import PluginUnavailable
from accelkit.partition import DevicePartition, Partition, SlotPartition, natural_sort_key
from accelkit.plugin import AbstractAgentContext, AbstractComputePlugin
from accelkit.testing.expectations import expect
from accelkit.types import (
    AgentId,
    ComputeDevice,
    DeviceAllocation,
    DeviceId,
    DeviceSlotInfo,
    SlotName,
    SlotType,
)

AGENT = AgentId("conformance")


def start_plugin(runner: asyncio.Runner, plugin: AbstractComputePlugin) -> AbstractComputePlugin:
    """Run ``init`` and discovery; skip the check when the plugin's hardware is absent."""
    try:
        runner.run(plugin.init())
    except PluginUnavailable as exc:
        pytest.skip(f"plugin {plugin.key!r} is unavailable here: {exc}")
    runner.run(plugin.discover())
    return plugin


def copier(plugin: AbstractComputePlugin) -> Callable[[], AbstractComputePlugin]:
    """Build fresh instances as deep copies of ``plugin``, which must not be started yet."""
    try:
        pristine = copy.deepcopy(plugin)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"

        def refuse() -> AbstractComputePlugin:
            msg = (
                f"the kit could not copy {type(plugin).__name__} to build a second, fresh "
                f"instance ({reason}); override the `plugin_factory` fixture to return a "
                "function that builds a new, not yet initialised plugin"
            )
            pytest.fail(msg, pytrace=False)

        return refuse
    return lambda: copy.deepcopy(pristine)


def smallest_amount(info: DeviceSlotInfo) -> Decimal:
    """One unit of a slot (1, or the device's whole capacity when that is less)."""
    if info.slot_type is SlotType.UNIQUE:
        return Decimal(1)
    return min(Decimal(1), info.amount)


@attrs.frozen
class AgentSetup:
    """An agent given every other device of the plugin (in natural order), and the rest."""

    plugin: AbstractComputePlugin
    context: AbstractAgentContext
    inside: tuple[ComputeDevice, ...]
    outside: tuple[ComputeDevice, ...]

    @property
    def mask(self) -> frozenset[DeviceId]:
        return frozenset(d.device_id for d in self.inside)

    @classmethod
    def build(cls, plugin: AbstractComputePlugin) -> AgentSetup:
        """Split a started plugin's devices and create the agent's context over its share."""
        ordered = sorted(plugin.devices, key=lambda d: natural_sort_key(d.device_id))
        if not ordered:
            pytest.skip(f"plugin {plugin.key!r} found no devices here")
        inside, outside = tuple(ordered[0::2]), tuple(ordered[1::2])
        context = plugin.create_agent_context(AGENT, partition_of(plugin, inside))
        return cls(plugin, context, inside, outside)

    def need_outside(self) -> ComputeDevice:
        """A device outside the agent's mask; skip when the plugin has only one device."""
        if not self.outside:
            pytest.skip("this check needs at least two devices")
        return self.outside[0]

    def single_grant(self, device: ComputeDevice) -> DeviceAllocation:
        """An allocation of the smallest amount on ``device``, as an alloc map would write it."""
        info = self.plugin.device_slots([device])[device.device_id]
        return {info.slot_name: {device.device_id: smallest_amount(info)}}

    def smallest_requests(self) -> dict[SlotName, Decimal]:
        """Per slot the agent offers, the smallest request an alloc map must accept."""
        requests: dict[SlotName, Decimal] = {}
        for info in self.plugin.device_slots(self.inside).values():
            amount = smallest_amount(info)
            if amount > 0:
                requests[info.slot_name] = max(requests.get(info.slot_name, amount), amount)
        return requests


def partition_of(plugin: AbstractComputePlugin, devices: tuple[ComputeDevice, ...]) -> Partition:
    """A partition of ``devices``: whole devices, or their amounts when shared by amount."""
    ids = tuple(d.device_id for d in devices)
    if not plugin.shared_by_amount:
        return DevicePartition(ids)
    slots: dict[SlotName, Decimal] = {}
    for info in plugin.device_slots(devices).values():
        slots[info.slot_name] = slots.get(info.slot_name, Decimal(0)) + info.amount
    return SlotPartition(slots, ids)


def outside_devices(alloc: DeviceAllocation, mask: frozenset[DeviceId]) -> list[DeviceId]:
    """The devices of ``alloc`` granted more than zero that lie outside ``mask``."""
    return sorted(
        {d for per_device in alloc.values() for d, amount in per_device.items() if amount > 0}
        - mask
    )


def expect_started_again(runner: asyncio.Runner, fresh: AbstractComputePlugin) -> None:
    """Start a second instance; it must be available when the first one was."""
    try:
        runner.run(fresh.init())
    except PluginUnavailable as exc:
        msg = (
            "a second instance built from the same configuration is unavailable "
            f"({exc}) although the first one started; init() must not depend on other instances"
        )
        expect(False, msg)
    runner.run(fresh.discover())
