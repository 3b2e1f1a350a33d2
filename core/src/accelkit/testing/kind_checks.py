"""Checks of the slot kinds: a whole slot is never divided, a divisible one by its quantum."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from accelkit.allocmap import AbstractAllocMap
from accelkit.errors import InvalidResourceArgument, PluginContractError, ResourceError
from accelkit.plugin import AbstractComputePlugin
from accelkit.testing.agent_setup import AgentSetup
from accelkit.testing.expectations import fail_rule
from accelkit.types import (
    DeviceAllocation,
    DeviceId,
    DeviceSlotInfo,
    SlotName,
    SlotSpec,
    format_amount,
    is_multiple,
)

WHOLE_RULE = "a whole slot is granted in whole units only, each unit to one workload"
DIVISIBLE_RULE = "a divisible slot is granted in multiples of its quantum"
_FIX_MAP = (
    "build the alloc map with slot_specs=self.configurable_slots() (the default "
    "create_alloc_map and fraction_alloc_map do)"
)


def _declared(plugin: AbstractComputePlugin) -> dict[SlotName, SlotSpec]:
    return {s.name: s for s in plugin.configurable_slots() if isinstance(s, SlotSpec)}


def _capacities(plugin: AbstractComputePlugin) -> dict[SlotName, list[tuple[DeviceId, Decimal]]]:
    found: dict[SlotName, list[tuple[DeviceId, Decimal]]] = {}
    for device_id, info in plugin.device_slots(plugin.devices).items():
        if isinstance(info, DeviceSlotInfo):
            found.setdefault(info.slot_name, []).append((device_id, info.amount))
    return found


def _grants(alloc: DeviceAllocation, slot: SlotName) -> Mapping[DeviceId, Decimal]:
    return {d: a for d, a in alloc.get(slot, {}).items() if a > 0}


class SlotKindChecks:
    """Whole slots stay whole in the plugin's map; divisible ones follow their quantum."""

    def test_device_capacities_fit_the_slot_kinds(self, started: AbstractComputePlugin) -> None:
        declared = _declared(started)
        for slot, devices in _capacities(started).items():
            spec = declared.get(slot)
            if spec is None:
                continue  # reported by test_every_device_slot_is_a_configurable_slot
            for device_id, amount in devices:
                if spec.whole and amount != amount.to_integral_value():
                    fail_rule(
                        started,
                        WHOLE_RULE,
                        f"device {device_id!r} offers {format_amount(amount)} of whole slot "
                        f"{slot!r}",
                        "give a whole slot's devices whole capacities (1 per device, as a GPU), "
                        "or declare the slot divisible=True with its quantum",
                    )
                if spec.quantum is not None and not is_multiple(amount, spec.quantum):
                    fail_rule(
                        started,
                        DIVISIBLE_RULE,
                        f"device {device_id!r} offers {format_amount(amount)} of {slot!r}, not "
                        f"a multiple of its quantum {format_amount(spec.quantum)}",
                        "make each device's capacity a multiple of the slot's quantum",
                    )

    def test_the_alloc_map_honours_the_slot_kinds(self, agent: AgentSetup) -> None:
        plugin = agent.plugin
        try:
            alloc_map = agent.context.create_alloc_map()
        except PluginContractError as exc:
            fail_rule(plugin, WHOLE_RULE, str(exc), _FIX_MAP)
        declared = _declared(plugin)
        capacities = _capacities(plugin)
        mask = agent.mask
        for slot, spec in sorted(declared.items()):
            devices = [(d, a) for d, a in capacities.get(slot, []) if d in mask and a > 0]
            if spec.divisible is None or not devices:
                continue  # an undeclared kind is the map's to choose (DESIGN §18)
            if spec.whole:
                self._check_whole(plugin, alloc_map, slot, devices)
            else:
                self._check_divisible(plugin, alloc_map, spec)

    @staticmethod
    def _check_whole(
        plugin: AbstractComputePlugin,
        alloc_map: AbstractAllocMap,
        slot: SlotName,
        devices: list[tuple[DeviceId, Decimal]],
    ) -> None:
        quantum = alloc_map.divisible_slots.get(slot)
        if quantum is not None:
            fail_rule(
                plugin,
                WHOLE_RULE,
                f"slot {slot!r} is declared whole but its alloc map divides it by "
                f"{format_amount(quantum)}",
                _FIX_MAP,
            )
        half = Decimal("0.5")
        try:
            granted = alloc_map.allocate({slot: half}, context_tag="conformance")
        except InvalidResourceArgument:
            pass
        except ResourceError as exc:
            fail_rule(
                plugin,
                WHOLE_RULE,
                f"allocate({{{slot!r}: 0.5}}) on a fresh map raised {type(exc).__name__}: {exc}",
                "refuse a fraction of a whole slot with InvalidResourceArgument",
            )
        else:
            alloc_map.free(granted)
            fail_rule(
                plugin,
                WHOLE_RULE,
                f"allocate({{{slot!r}: 0.5}}) granted {dict(_grants(granted, slot))}",
                f"refuse fractions of {slot!r}: {_FIX_MAP}",
            )
        held: list[DeviceAllocation] = []
        try:
            seen: dict[DeviceId, int] = {}
            for _ in range(min(len(devices), 2)):
                alloc = alloc_map.allocate({slot: Decimal(1)}, context_tag="conformance")
                held.append(alloc)
                for device_id, amount in _grants(alloc, slot).items():
                    seen[device_id] = seen.get(device_id, 0) + 1
                    if amount != amount.to_integral_value():
                        fail_rule(
                            plugin,
                            WHOLE_RULE,
                            f"a request of 1 {slot!r} was granted {format_amount(amount)} "
                            f"of {device_id!r}",
                            _FIX_MAP,
                        )
            capacity = dict(devices)
            shared = sorted(d for d, n in seen.items() if n > 1 and capacity.get(d) == 1)
            if shared:
                fail_rule(
                    plugin,
                    WHOLE_RULE,
                    f"two requests of 1 {slot!r} were both granted device(s) {shared}",
                    _FIX_MAP,
                )
        finally:
            for alloc in held:
                alloc_map.free(alloc)

    @staticmethod
    def _check_divisible(
        plugin: AbstractComputePlugin, alloc_map: AbstractAllocMap, spec: SlotSpec
    ) -> None:
        quantum = alloc_map.divisible_slots.get(spec.name)
        if quantum is None and spec.name in alloc_map.whole_slots:
            fail_rule(
                plugin,
                DIVISIBLE_RULE,
                f"slot {spec.name!r} is declared divisible but its alloc map grants it whole",
                _FIX_MAP,
            )
        if quantum is not None and spec.quantum is not None and quantum != spec.quantum:
            fail_rule(
                plugin,
                DIVISIBLE_RULE,
                f"slot {spec.name!r} is declared divisible by {format_amount(spec.quantum)} "
                f"but its alloc map divides it by {format_amount(quantum)}",
                "build the alloc map with the slot's quantum as its quantum_size",
            )
