"""The conformance checks every compute plugin must pass."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal

import pytest

from accelkit.errors import InvalidResourceArgument, PluginUnavailable
from accelkit.partition import DevicePartition, SlotPartition
from accelkit.plugin import AbstractComputePlugin
from accelkit.registry import slot_is_prefixed
from accelkit.types import AgentId, DeviceId, SlotName, Workload, WorkloadConfig


def _run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


class PluginConformance:
    """Subclass this and provide a ``plugin`` fixture returning a fresh plugin instance."""

    @pytest.fixture
    def started(self, plugin: AbstractComputePlugin) -> Iterator[AbstractComputePlugin]:
        """The plugin after ``init`` and discovery; skipped when its hardware is absent."""
        try:
            _run(plugin.init())
        except PluginUnavailable as exc:
            pytest.skip(f"plugin {plugin.key!r} is unavailable here: {exc}")
        _run(plugin.discover())
        yield plugin
        _run(plugin.cleanup())

    def test_key_is_a_plain_name(self, plugin: AbstractComputePlugin) -> None:
        key = getattr(plugin, "key", "")
        assert isinstance(key, str), "the plugin class must set `key` to its device name"
        assert key, "the plugin class must set `key` to its device name, e.g. key = 'npu'"
        assert "." not in key, f"the key {key!r} must not contain a dot"

    def test_configurable_slots_are_prefixed_by_the_key(
        self, plugin: AbstractComputePlugin
    ) -> None:
        for spec in plugin.configurable_slots():
            assert slot_is_prefixed(plugin.key, spec.name), (
                f"slot {spec.name!r} must be named '{plugin.key}.<slot>' "
                f"(only the cpu and mem plugins use the bare names 'cpu' and 'mem')"
            )

    def test_every_device_slot_is_a_configurable_slot(self, started: AbstractComputePlugin) -> None:
        declared = {spec.name for spec in started.configurable_slots()}
        for device_id, info in started.device_slots(started.devices).items():
            assert info.slot_name in declared, (
                f"device {device_id!r} reports slot {info.slot_name!r}, which "
                f"configurable_slots() does not list ({sorted(declared)})"
            )
            assert info.amount >= 0, f"device {device_id!r} reports a negative capacity"

    def test_devices_are_named_for_the_plugin(self, started: AbstractComputePlugin) -> None:
        ids = [d.device_id for d in started.devices]
        assert len(ids) == len(set(ids)), f"device ids must be unique, got {ids}"
        for device in started.devices:
            assert device.device_name == started.key, (
                f"device {device.device_id!r} has device_name {device.device_name!r}; "
                f"it must be the plugin key {started.key!r}"
            )

    def _partition_of_first(
        self, plugin: AbstractComputePlugin
    ) -> tuple[DevicePartition | SlotPartition, frozenset[DeviceId]]:
        first = plugin.devices[:1]
        ids = tuple(d.device_id for d in first)
        if plugin.shared_by_amount:
            slots: dict[SlotName, Decimal] = {}
            for info in plugin.device_slots(first).values():
                slots[info.slot_name] = slots.get(info.slot_name, Decimal(0)) + info.amount
            return SlotPartition(slots, ids), frozenset(ids)
        return DevicePartition(ids), frozenset(ids)

    def test_context_sees_only_its_devices(self, started: AbstractComputePlugin) -> None:
        if not started.devices:
            pytest.skip("the plugin found no devices here")
        partition, mask = self._partition_of_first(started)
        ctx = started.create_agent_context(AgentId("conformance"), partition)
        seen = {d.device_id for d in ctx.list_devices()}
        assert seen == mask, f"the agent context lists {sorted(seen)}, its mask is {sorted(mask)}"
        assert ctx.device_mask == mask

    def test_alloc_map_refuses_devices_outside_the_mask(
        self, started: AbstractComputePlugin
    ) -> None:
        if len(started.devices) < 2:
            pytest.skip("needs at least two devices")
        partition, _mask = self._partition_of_first(started)
        ctx = started.create_agent_context(AgentId("conformance"), partition)
        outside = started.devices[1]
        info = started.device_slots([outside])[outside.device_id]
        foreign = {info.slot_name: {outside.device_id: min(info.amount, Decimal(1))}}
        with pytest.raises(InvalidResourceArgument):
            ctx.alloc_map.apply_allocation(foreign)
        with pytest.raises(InvalidResourceArgument):
            ctx.create_lifecycle_hook(Workload("conformance"), foreign)

    def test_hooks_are_deterministic_and_stateless(self, started: AbstractComputePlugin) -> None:
        if not started.devices:
            pytest.skip("the plugin found no devices here")
        partition, _mask = self._partition_of_first(started)
        ctx = started.create_agent_context(AgentId("conformance"), partition)
        slots = ctx.available_slots()
        request = {name: min(amount, Decimal(1)) for name, amount in slots.items() if amount > 0}
        request = dict(list(request.items())[:1])
        if not request:
            pytest.skip("no capacity to allocate")
        alloc = ctx.alloc_map.allocate(request)
        workload = Workload("conformance")
        first = _run(ctx.create_lifecycle_hook(workload, alloc).pre_create())
        second = _run(ctx.create_lifecycle_hook(workload, alloc).pre_create())
        assert isinstance(first, WorkloadConfig), "pre_create must return a WorkloadConfig"
        assert first == second, "the same (workload, device_alloc) must give the same config"
        ctx.alloc_map.free(alloc)

    def test_cleanup_is_idempotent(self, started: AbstractComputePlugin) -> None:
        _run(started.cleanup())
        _run(started.cleanup())
