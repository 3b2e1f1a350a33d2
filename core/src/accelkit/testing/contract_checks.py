"""Checks of the plugin object itself: its key, slots, devices and cleanup."""

from __future__ import annotations

import asyncio
import warnings

from accelkit.apiversion import PLUGIN_API_VERSION, check_api_version
from accelkit.errors import PluginContractError
from accelkit.plugin import AbstractComputePlugin, PluginRole
from accelkit.registry import slot_belongs
from accelkit.testing.expectations import expect, expect_none, fail_rule
from accelkit.types import DeviceSlotInfo, NodeInfo, SlotSpec, SlotType

#: what the one plugin of each non-accelerator role offers and how agents split it
_ROLE_SLOTS = {
    PluginRole.CORES: (SlotType.COUNT, False, "cores are split by device"),
    PluginRole.MEMORY: (SlotType.BYTES, True, "memory is split by amount"),
}


class ContractChecks:
    """The key, the slot names, the devices, node info and cleanup."""

    def test_key_is_a_plain_name(self, plugin: AbstractComputePlugin) -> None:
        key = getattr(plugin, "key", None)
        expect(
            isinstance(key, str) and bool(key),
            f"{type(plugin).__name__} must set the class attribute `key` to its device name, "
            f"for example key = 'npu' (got {key!r})",
        )
        expect("." not in str(key), f"the key {key!r} must not contain a dot")

    def test_api_version_is_declared_and_compatible(self, plugin: AbstractComputePlugin) -> None:
        rule = "the plugin class declares the plugin API it was written against"
        fix = f"set api_version = {PLUGIN_API_VERSION!r} on {type(plugin).__name__}"
        if getattr(type(plugin), "api_version", None) is None:
            fail_rule(plugin, rule, "the class declares no api_version", fix)
        try:
            warning = check_api_version(plugin, type(plugin).__name__)
        except PluginContractError as exc:
            major = PLUGIN_API_VERSION.partition(".")[0]
            fail_rule(plugin, rule, str(exc), f"port the plugin to plugin API {major}.x and {fix}")
        if warning is not None:  # a newer minor: this accelkit may lack what the plugin uses
            warnings.warn(warning, stacklevel=1)

    def test_role_is_declared_and_fits_the_slots(self, plugin: AbstractComputePlugin) -> None:
        rule = "the plugin's role is a PluginRole that matches its slots"
        role = getattr(type(plugin), "role", None)
        if not isinstance(role, PluginRole):
            fail_rule(
                plugin,
                rule,
                f"role is {role!r}, not a PluginRole",
                "leave role alone for an accelerator, or set role = PluginRole.CORES (the "
                "node's cpu cores) or PluginRole.MEMORY (its memory)",
            )
        if role is PluginRole.ACCELERATOR:
            return  # a bare slot it offers is reported by the slot-naming check
        specs = [s for s in plugin.configurable_slots() if isinstance(s, SlotSpec)]
        bare, by_name = role.bare_slot, {s.name: s for s in specs}
        slot_type, by_amount, how = _ROLE_SLOTS[role]
        if bare not in by_name:
            fail_rule(
                plugin,
                rule,
                f"role {role.value!r} but no slot {bare!r} among {sorted(by_name)}",
                f"offer the slot {bare!r} ({slot_type.value}), or leave role as ACCELERATOR",
            )
        if by_name[bare].type is not slot_type:
            fail_rule(
                plugin,
                rule,
                f"slot {bare!r} is {by_name[bare].type.value}, not {slot_type.value}",
                f"declare SlotSpec({bare!r}, SlotType.{slot_type.name}, ...)",
            )
        if plugin.shared_by_amount is not by_amount:
            fail_rule(
                plugin,
                rule,
                f"role {role.value!r} with shared_by_amount = {plugin.shared_by_amount}",
                f"set shared_by_amount = {by_amount} ({how})",
            )

    def test_configurable_slots_are_prefixed_by_the_key(
        self, plugin: AbstractComputePlugin
    ) -> None:
        specs = list(plugin.configurable_slots())
        expect(bool(specs), "configurable_slots() must list at least one slot")
        problems = []
        names = [getattr(spec, "name", None) for spec in specs]
        for spec in specs:
            if not isinstance(spec, SlotSpec):
                problems.append(f"{spec!r} is a {type(spec).__name__}, not a SlotSpec")
            elif not slot_belongs(plugin.key, plugin.role, spec.name):
                problems.append(
                    f"slot {spec.name!r} must be named '{plugin.key}.<slot>' (only the plugin "
                    "with role PluginRole.CORES offers the bare 'cpu', and only the one with "
                    "PluginRole.MEMORY the bare 'mem')"
                )
        if duplicates := sorted({str(n) for n in names if names.count(n) > 1}):
            problems.append(f"slot(s) {duplicates} are listed more than once")
        expect_none(problems, "configurable_slots() breaks the naming rules")

    def test_devices_are_named_for_the_plugin(self, started: AbstractComputePlugin) -> None:
        ids = [d.device_id for d in started.devices]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        expect(not repeated, f"device ids must be unique, but {repeated} appear more than once")
        for device in started.devices:
            expect(
                device.device_name == started.key,
                f"device {device.device_id!r} has device_name {device.device_name!r}; "
                f"it must be the plugin key {started.key!r}",
            )

    def test_every_device_slot_is_a_configurable_slot(self, started: AbstractComputePlugin) -> None:
        declared = {spec.name: spec for spec in started.configurable_slots()}
        slots = started.device_slots(started.devices)
        missing = sorted({d.device_id for d in started.devices} - set(slots))
        expect(not missing, f"device_slots() gives no slot for device(s) {missing}")
        numa = {d.device_id: d.numa_node for d in started.devices}
        problems = []
        for device_id, info in slots.items():
            if not isinstance(info, DeviceSlotInfo):
                problems.append(f"device {device_id!r}: {info!r} is not a DeviceSlotInfo")
                continue
            if (spec := declared.get(info.slot_name)) is None:
                problems.append(
                    f"device {device_id!r} reports slot {info.slot_name!r}, which "
                    f"configurable_slots() does not list ({sorted(declared)})"
                )
            elif info.slot_type != spec.type:
                problems.append(
                    f"device {device_id!r} reports slot {info.slot_name!r} as "
                    f"{info.slot_type.value}, but configurable_slots() declares it "
                    f"{spec.type.value}"
                )
            if info.numa_node is not None and info.numa_node != numa.get(device_id):
                problems.append(
                    f"device {device_id!r} reports NUMA node {info.numa_node} in device_slots() "
                    f"but {numa.get(device_id)} in list_devices()"
                )
        expect_none(problems, "device_slots() disagrees with the plugin's slots and devices")

    def test_devices_are_listed_in_the_same_order_every_time(
        self, started: AbstractComputePlugin, runner: asyncio.Runner
    ) -> None:
        first = [d.device_id for d in started.devices]
        again = [d.device_id for d in runner.run(started.list_devices())]
        expect(
            again == first,
            f"list_devices() gave {first} when the plugin started and {again} when asked "
            "again; the same devices must come in the same order (agents split them by it)",
        )

    def test_device_slots_cover_only_the_devices_asked_for(
        self, started: AbstractComputePlugin
    ) -> None:
        first = started.devices[:1]
        asked = {d.device_id for d in first}
        given = set(started.device_slots(first))
        expect(
            given == asked,
            f"device_slots() was given {sorted(asked)} and answered for {sorted(given)}; "
            "it must describe exactly the devices it is given",
        )

    def test_node_info_is_a_node_info(
        self, started: AbstractComputePlugin, runner: asyncio.Runner
    ) -> None:
        info = runner.run(started.get_node_info())
        expect(
            isinstance(info, NodeInfo),
            f"get_node_info() must return a NodeInfo, not {type(info).__name__}",
        )

    def test_cleanup_is_idempotent(
        self, started: AbstractComputePlugin, runner: asyncio.Runner
    ) -> None:
        for attempt in ("first", "second"):
            try:
                runner.run(started.cleanup())
            except Exception as exc:
                msg = f"cleanup() must be safe to call twice; the {attempt} call raised {exc!r}"
                expect(False, msg)
