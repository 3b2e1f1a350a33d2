"""The kind of each slot of a map: whole (whole units only) or divisible (by its quantum).

A map learns the kinds from the plugin's :class:`~accelkit.types.SlotSpec` declarations; a
slot declared nowhere gets the kind :func:`~accelkit.types.derived_divisible` gives it. Each
slot keeps its own kind whatever the map's other slots are: a fraction map hands out a
whole slot in whole units, as a discrete map would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from accelkit.errors import InvalidResourceArgument, PluginContractError
from accelkit.types import SlotName, SlotSpec, SlotType, derived_divisible, format_amount


def declared_specs(slot_specs: Iterable[SlotSpec]) -> dict[SlotName, SlotSpec]:
    """The specs by slot name, each checked to be a :class:`SlotSpec`."""
    found: dict[SlotName, SlotSpec] = {}
    for spec in slot_specs:
        if not isinstance(spec, SlotSpec):
            msg = f"slot specs must be SlotSpec, got {type(spec).__name__} {spec!r:.80}"
            raise InvalidResourceArgument(msg)
        found[spec.name] = spec
    return found


def slot_quanta(
    types: Mapping[SlotName, SlotType],
    specs: Mapping[SlotName, SlotSpec],
    *,
    fractional: bool,
    unit: Decimal,
) -> dict[SlotName, Decimal]:
    """The divisible slots among ``types`` and the quantum of each; the rest are whole.

    ``fractional`` says whether the map divides devices (a fraction map), ``unit`` is the
    quantum its divisible slots are granted in (1 for a discrete map). A slot declared
    divisible with another quantum, or declared divisible while its devices report it
    UNIQUE, is refused: the map could not honour the declaration.
    """
    quanta: dict[SlotName, Decimal] = {}
    for name, slot_type in types.items():
        spec = specs.get(name)
        declared = None if spec is None else spec.divisible
        if declared is None:
            if derived_divisible(slot_type, fractional):
                quanta[name] = unit
            continue
        if not declared:
            continue
        if slot_type is SlotType.UNIQUE:
            msg = f"slot {name!r} is declared divisible, but its devices report it UNIQUE"
            raise InvalidResourceArgument(msg)
        quantum = unit if spec is None or spec.quantum is None else spec.quantum
        if quantum != unit:
            kind = "this fraction map's quantum" if fractional else "a discrete map's unit"
            msg = (
                f"slot {name!r} is declared divisible by {format_amount(quantum)}, but "
                f"{kind} is {format_amount(unit)} (a map grants its divisible slots in one "
                "quantum: build a FractionAllocMap with quantum_size equal to the slot's)"
            )
            raise InvalidResourceArgument(msg)
        quanta[name] = quantum
    return quanta


def whole_units(slot_type: SlotType, amount: Decimal) -> int:
    """Units a device of ``amount`` capacity contributes to a whole slot: its whole part (a
    UNIQUE device is one unit)."""
    if slot_type is SlotType.UNIQUE:
        return 1 if amount > 0 else 0
    # DeviceSlotInfo keeps capacities within the amount range (types.AMOUNT_DIGITS)
    return int(amount)


def refuse_divided_whole(
    key: str, slot_specs: Iterable[SlotSpec], divisible: Mapping[SlotName, Decimal]
) -> None:
    """Refuse a map whose ``divisible`` slots include slots ``slot_specs`` declare whole (a map
    built without the plugin's specs, which would hand out fractions of a whole device)."""
    divided = sorted(
        s.name for s in slot_specs if isinstance(s, SlotSpec) and s.whole and s.name in divisible
    )
    if divided:
        msg = (
            f"plugin {key!r} declares slot(s) {divided} whole, but its alloc map divides "
            "them: build the map with slot_specs=self.configurable_slots()"
        )
        raise PluginContractError(msg)
