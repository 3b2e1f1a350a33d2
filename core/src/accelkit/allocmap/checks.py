"""Validation helpers and error messages shared by the alloc maps."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from accelkit.allocmap.pool import SlotPool
from accelkit.allocmap.strategy import AllocationStrategy
from accelkit.errors import (
    InsufficientResource,
    InvalidResourceArgument,
    InvalidResourceCombination,
    refusal,
)
from accelkit.types import (
    DeviceId,
    DeviceSlotInfo,
    SlotName,
    describe_amount,
    parse_choice,
    to_decimal,
)


def as_strings(value: Iterable[str] | str, what: str) -> tuple[str, ...]:
    """A tuple of strings; a bare string is one item, not an iterable of one-letter items."""
    items = (value,) if isinstance(value, str) else tuple(value)
    for item in items:
        if not isinstance(item, str):
            msg = f"{what} must be strings, got {item!r}"
            raise InvalidResourceArgument(msg)
    return items


def slot_infos(device_slots: Mapping[DeviceId, DeviceSlotInfo]) -> dict[DeviceId, DeviceSlotInfo]:
    """A map's devices, each checked to come with a :class:`DeviceSlotInfo`."""
    infos = dict(device_slots)
    for dev, info in infos.items():
        if not isinstance(info, DeviceSlotInfo):
            msg = f"device {dev!r}: expected a DeviceSlotInfo, got {type(info).__name__}"
            raise InvalidResourceArgument(msg)
    return infos


def strategy_of(value: AllocationStrategy | str) -> AllocationStrategy:
    """``value`` as a strategy; an unknown one is refused, naming the strategies there are."""
    try:
        return parse_choice(AllocationStrategy, value, "allocation strategy")
    except ValueError as exc:
        raise InvalidResourceArgument(str(exc)) from None


def not_whole(pool: SlotPool, amount: Decimal) -> str:
    """Why a request or grant of ``amount`` of ``pool`` is refused: not a whole number."""
    if pool.whole and not pool.unique:  # declared whole, or derived so
        what = "is whole: it is granted in whole units only"
    else:
        what = "takes whole amounts"
    return f"slot {pool.name!r} {what}, not {describe_amount(amount)}"


def tag(context_tag: str | None) -> str:
    """The prefix naming the requester in error messages."""
    return f"[{context_tag}] " if context_tag else ""


def coerce(value: Any, slot: str, context_tag: str | None) -> Decimal:
    """``value`` as a finite Decimal, or :class:`InvalidResourceArgument` (floats included)."""
    try:
        return to_decimal(value)
    except (TypeError, ValueError) as exc:
        msg = f"{tag(context_tag)}slot {slot!r}: {exc}"
        raise InvalidResourceArgument(msg) from exc


def is_zero(value: Any) -> bool:
    """Whether ``value`` is a zero amount; malformed amounts are not (allocate reports them)."""
    try:
        return to_decimal(value) == 0
    except (TypeError, ValueError):
        return False


def check_exclusive(
    exclusive: Mapping[SlotName, frozenset[str]],
    slots: Mapping[SlotName, Any],
    context_tag: str | None,
) -> None:
    """Refuse requested slots of different exclusive slot types.

    Rule: the requested (non-zero) slots that match any exclusive pattern must all match one
    common pattern; slots matching no pattern combine with anything.
    """
    common: frozenset[str] | None = None
    involved: list[str] = []
    for slot, requested in slots.items():
        matched = exclusive.get(slot)
        if matched is None or is_zero(requested):
            continue
        involved.append(slot)
        common = matched if common is None else common & matched
        if not common:
            msg = (
                f"{tag(context_tag)}slots {', '.join(map(repr, involved))} belong to "
                "mutually exclusive slot types and cannot be requested together"
            )
            raise InvalidResourceCombination(msg)


def insufficient(
    pool: SlotPool, requested: Decimal, free: Decimal, context_tag: str | None
) -> InsufficientResource:
    """The error for a request larger than the ``free`` amount of ``pool``; it names the
    pool's unavailable devices, if any."""
    # Failed allocations are part of normal operation (agents probe for room): the error
    # renders its message only when it is read.
    refused = refusal(InsufficientResource, pool.name, requested, free, context_tag)
    if not pool.hidden:
        return refused
    # Only unhealthy or cordoned devices are made unavailable (the node's health keeper).
    names = ", ".join(sorted(pool.ids[i] for i in pool.hidden))
    return InsufficientResource(
        f"{refused} (unavailable, unhealthy or cordoned: {names})",
        slot=pool.name,
        requested=requested,
        allocatable=free,
        context_tag=context_tag,
    )


def over(
    pool: SlotPool, dev: DeviceId, amount: Decimal, room: Decimal, freeing: bool
) -> InvalidResourceArgument:
    """The error for applying more than is free, or freeing more than is allocated."""
    op, what = ("free", "allocated") if freeing else ("apply", "free")
    msg = (
        f"cannot {op} {describe_amount(amount)} of {pool.name!r} on {dev!r}: "
        f"only {describe_amount(room)} {what}"
    )
    return InvalidResourceArgument(msg)


def why_not_in(
    all_slots: Mapping[DeviceId, DeviceSlotInfo],
    mask: frozenset[DeviceId],
    pool: SlotPool,
    dev: DeviceId,
    op: str,
) -> str:
    """Why ``dev`` is not a device of ``pool``: unknown, outside the mask, or another slot."""
    info = all_slots.get(dev)
    if info is None:
        return f"cannot {op}: unknown device {dev!r}"
    if dev not in mask:
        return f"cannot {op}: device {dev!r} is outside the device mask"
    return f"cannot {op}: device {dev!r} provides slot {info.slot_name!r}, not {pool.name!r}"
