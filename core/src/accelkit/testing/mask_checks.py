"""Checks that an agent's context confines every method to the devices of its mask."""

from __future__ import annotations

from decimal import Decimal

from accelkit.allocmap import AbstractAllocMap
from accelkit.errors import InvalidResourceArgument, ResourceError
from accelkit.testing.agent_setup import AgentSetup, outside_devices
from accelkit.testing.expectations import expect
from accelkit.types import DeviceAllocation, DeviceId, SlotName, SlotType, Workload

_REFUSAL = (
    "{call} accepted device {device!r}, which lies outside the agent's mask {mask}; "
    "it must raise InvalidResourceArgument"
)


def _refuses(agent: AgentSetup, call: str, action: object, *args: object) -> None:
    device = agent.need_outside().device_id
    try:
        action(*args)  # type: ignore[operator]
    except InvalidResourceArgument:
        return
    expect(False, _REFUSAL.format(call=call, device=device, mask=sorted(agent.mask)))


def _exhaust(
    alloc_map: AbstractAllocMap, agent: AgentSetup, slot: SlotName
) -> list[DeviceAllocation]:
    """Allocate ``slot`` until the map is full; check each grant stays inside the mask."""
    infos = [i for i in agent.plugin.device_slots(agent.inside).values() if i.slot_name == slot]
    unique = infos[0].slot_type is SlotType.UNIQUE
    free = alloc_map.allocatable().get(slot, Decimal(0))
    grants: list[DeviceAllocation] = []
    for _ in range(len(agent.plugin.devices) + 1):
        if free <= 0:
            break
        request = Decimal(1) if unique else free
        alloc = alloc_map.allocate({slot: request})
        grants.append(alloc)
        stray = outside_devices(alloc, agent.mask)
        expect(
            not stray,
            f"allocating {request} of {slot!r} granted device(s) {stray}, outside the agent's "
            f"mask {sorted(agent.mask)}",
        )
        free = alloc_map.allocatable().get(slot, Decimal(0))
    return grants


def _expect_full(alloc_map: AbstractAllocMap, agent: AgentSetup, slot: SlotName) -> None:
    try:
        extra = alloc_map.allocate({slot: Decimal(1)})
    except ResourceError:
        return
    msg = (
        f"after the agent's devices {sorted(agent.mask)} were fully allocated in {slot!r}, "
        f"allocate() still granted {dict(extra)}; it must raise InsufficientResource"
    )
    expect(False, msg)


class MaskChecks:
    """Every context method sees, allocates and accepts only the agent's devices."""

    def test_context_lists_only_its_devices(self, agent: AgentSetup) -> None:
        seen = {d.device_id for d in agent.context.list_devices()}
        expect(
            seen == agent.mask,
            f"the agent context lists {sorted(seen)}, but its mask is {sorted(agent.mask)}",
        )
        expect(
            agent.context.device_mask == agent.mask,
            f"the context's device_mask is {sorted(agent.context.device_mask)}, "
            f"but the agent was given {sorted(agent.mask)}",
        )

    def test_available_slots_count_only_its_devices(self, agent: AgentSetup) -> None:
        expected: dict[SlotName, Decimal] = {}
        for info in agent.plugin.device_slots(agent.inside).values():
            expected[info.slot_name] = expected.get(info.slot_name, Decimal(0)) + info.amount
        declared = {spec.name for spec in agent.plugin.configurable_slots()}
        available = agent.context.available_slots()
        for slot, amount in available.items():
            expect(
                slot in declared,
                f"available_slots() offers slot {slot!r}, which configurable_slots() does not "
                f"list ({sorted(declared)})",
            )
            expect(
                amount <= expected.get(slot, Decimal(0)),
                f"available_slots() offers {amount} of {slot!r}, more than the agent's devices "
                f"{sorted(agent.mask)} hold ({expected.get(slot, Decimal(0))})",
            )

    def test_alloc_maps_cover_only_its_devices(self, agent: AgentSetup) -> None:
        for name, alloc_map in (
            ("create_alloc_map()", agent.context.create_alloc_map()),
            ("the alloc_map attribute", agent.context.alloc_map),
        ):
            stray = sorted(
                set(alloc_map.device_mask) - agent.mask
                | {d for per in alloc_map.allocations.values() for d in per} - agent.mask
            )
            expect(
                not stray,
                f"{name} of the agent context covers device(s) {stray}, outside the agent's "
                f"mask {sorted(agent.mask)}",
            )

    def test_allocate_never_grants_devices_outside_the_mask(self, agent: AgentSetup) -> None:
        declared = {spec.name for spec in agent.plugin.configurable_slots()}
        for slot in agent.context.available_slots():
            alloc_map = agent.context.create_alloc_map()
            grants = _exhaust(alloc_map, agent, slot)
            for alloc in grants:
                unknown = set(alloc) - declared
                expect(not unknown, f"allocate() returned undeclared slot(s) {sorted(unknown)}")
            _expect_full(alloc_map, agent, slot)
            for alloc in grants:
                alloc_map.free(alloc)

    def test_apply_allocation_refuses_devices_outside_the_mask(self, agent: AgentSetup) -> None:
        foreign = agent.single_grant(agent.need_outside())
        all_slots = agent.plugin.device_slots(agent.plugin.devices)
        for name, alloc_map in (
            ("the agent's alloc map", agent.context.create_alloc_map()),
            (
                "the plugin's create_alloc_map()",
                agent.plugin.create_alloc_map(all_slots, agent.mask),
            ),
        ):
            before = alloc_map.allocations
            _refuses(agent, f"apply_allocation() on {name}", alloc_map.apply_allocation, foreign)
            expect(
                alloc_map.allocations == before,
                f"a refused apply_allocation() on {name} changed its allocations",
            )

    def test_free_refuses_devices_outside_the_mask(self, agent: AgentSetup) -> None:
        foreign = agent.single_grant(agent.need_outside())
        own = agent.single_grant(agent.inside[0])
        alloc_map = agent.context.create_alloc_map()
        alloc_map.apply_allocation(own)
        mixed: dict[SlotName, dict[DeviceId, Decimal]] = {}
        for part in (own, foreign):
            for slot, per_device in part.items():
                mixed.setdefault(slot, {}).update(per_device)
        before = alloc_map.allocations
        _refuses(agent, "free() on the agent's alloc map", alloc_map.free, mixed)
        expect(
            alloc_map.allocations == before,
            "a refused free() changed the allocations; it must free all or nothing",
        )

    def test_alloc_to_devices_refuses_devices_outside_the_mask(self, agent: AgentSetup) -> None:
        own = agent.single_grant(agent.inside[0])
        named = [d.device_id for d in agent.context.alloc_to_devices(own)]
        expect(
            named == [agent.inside[0].device_id],
            f"alloc_to_devices() of an allocation of {agent.inside[0].device_id!r} "
            f"returned {named}",
        )
        foreign = agent.single_grant(agent.need_outside())
        _refuses(agent, "alloc_to_devices()", agent.context.alloc_to_devices, foreign)

    def test_lifecycle_hook_refuses_devices_outside_the_mask(self, agent: AgentSetup) -> None:
        foreign = agent.single_grant(agent.need_outside())
        workload = Workload.process_tree("conformance")
        _refuses(
            agent, "create_lifecycle_hook()", agent.context.create_lifecycle_hook, workload, foreign
        )
