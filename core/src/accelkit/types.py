"""Vocabulary and value types shared by the core and every plugin."""

from __future__ import annotations

import decimal
import enum
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, NewType, TypeVar

import attrs
from frozendict import frozendict

from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr

__all__ = [
    "AMOUNT_DIGITS",
    "MESSAGE_DIGITS",
    "AgentId",
    "ComputeDevice",
    "DeviceAllocation",
    "DeviceId",
    "DeviceName",
    "DeviceSlotInfo",
    "Mount",
    "MountType",
    "NodeInfo",
    "SlotName",
    "SlotSpec",
    "SlotType",
    "Workload",
    "WorkloadConfig",
    "WorkloadType",
    "amount_in_range",
    "derived_divisible",
    "describe_amount",
    "format_amount",
    "is_digits",
    "is_multiple",
    "parse_choice",
    "range_problem",
    "to_decimal",
]

DeviceName = NewType("DeviceName", str)
DeviceId = NewType("DeviceId", str)
SlotName = NewType("SlotName", str)
AgentId = NewType("AgentId", str)

DeviceAllocation = Mapping[SlotName, Mapping[DeviceId, Decimal]]


def to_decimal(value: Any) -> Decimal:
    """Convert an amount to :class:`~decimal.Decimal`, refusing floats and non-finite values."""
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, bool | float):
        msg = f"amounts must be Decimal, int or str, not {type(value).__name__} ({value!r})"
        raise TypeError(msg)
    elif isinstance(value, int | str):
        try:
            result = Decimal(value)
        except InvalidOperation:
            msg = f"not a decimal amount: {value!r}"
            raise ValueError(msg) from None
    else:
        msg = f"amounts must be Decimal, int or str, not {type(value).__name__}"
        raise TypeError(msg)
    if not result.is_finite():
        msg = f"amount must be finite, got {value!r}"
        raise ValueError(msg)
    return result


def format_amount(value: Decimal) -> str:
    """Render an amount in plain integer or fixed-point form (never exponent form).

    Every digit is kept, however many: ``format(…, "f")`` is exact, unlike a quantize under the
    default 28-digit context. Trailing zeros after the point are dropped (``2.50`` → ``2.5``).
    """
    if not value.is_finite():
        return str(value)
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


#: the digits an amount may have after the decimal point, and one less than it may have
#: before: far beyond any device, and every amount within it stays exact under the default
#: decimal context (28 digits) when it is added, compared or rendered. Device capacities, the
#: CLI's requests and ledger records are held to it.
AMOUNT_DIGITS = 24


def amount_in_range(value: Decimal) -> bool:
    """Whether a finite ``value`` is below ``10 ** (AMOUNT_DIGITS + 1)`` and has at most
    :data:`AMOUNT_DIGITS` decimal places (trailing zeros are no places: ``1.000`` has none)."""
    if not value:
        return True
    _sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):  # NaN or infinity
        return False
    if value.adjusted() > AMOUNT_DIGITS:
        return False
    places = -exponent
    end = len(digits)
    while places > 0 and end > 1 and digits[end - 1] == 0:
        end -= 1
        places -= 1
    return places <= AMOUNT_DIGITS


def is_multiple(amount: Decimal, quantum: Decimal) -> bool:
    """Whether ``amount`` is a whole multiple of a positive ``quantum``, exactly.

    ``amount % quantum`` needs the quotient within the decimal context's 28 digits: ``1 %
    Decimal("1E-30")`` raises ``InvalidOperation`` instead of answering.
    """
    n, d = amount.as_integer_ratio()
    qn, qd = quantum.as_integer_ratio()
    return (n * qd) % (d * qn) == 0


def range_problem(value: Decimal, given: str | None = None) -> str:
    """What :func:`amount_in_range` refuses ``value`` for, in words; ``given`` is the text it
    was written as, when there is one (it is quoted as written)."""
    shown = repr(given) if given is not None else describe_amount(value)
    return (
        f"{shown} is out of range (at most {AMOUNT_DIGITS + 1} digits before the decimal point "
        f"and {AMOUNT_DIGITS} after)"
    )


#: amounts with more digits than this before or after the point are shown in scientific form
#: in messages (:func:`describe_amount`)
MESSAGE_DIGITS = 40


def describe_amount(value: Decimal) -> str:
    """An amount as a message shows it: its plain form (:func:`format_amount`), or, for an
    amount of more than :data:`MESSAGE_DIGITS` digits before or after the point (an absurd
    request such as ``1E+999999``), its scientific form, which is as exact and stays short."""
    if value.is_finite() and abs(value.adjusted()) > MESSAGE_DIGITS:
        # without its trailing zeros (exact: the context holds every digit it has)
        digits = max(1, len(value.as_tuple().digits))
        exact = decimal.Context(prec=digits, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
        return format(value.normalize(exact), "E")
    return format_amount(value)


def is_digits(text: str) -> bool:
    """Whether ``text`` is a non-empty run of ASCII digits: what ``int()`` reads as a plain
    number (``str.isdigit`` is true of ``"²"`` too, which ``int()`` refuses)."""
    return text.isascii() and text.isdigit()


_E = TypeVar("_E", bound=enum.Enum)


def parse_choice(enum_type: type[_E], value: object, what: str) -> _E:
    """``value`` as a member of ``enum_type``, else a ``ValueError`` that names the values
    there are: ``unknown allocation strategy 'most-free' (use 'fill', 'evenly')``."""
    try:
        return enum_type(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in enum_type)
        msg = f"unknown {what} {value!r} (use {choices})"
        raise ValueError(msg) from None


class SlotType(enum.StrEnum):
    """How a slot's amounts are counted."""

    COUNT = "count"
    BYTES = "bytes"
    UNIQUE = "unique"  # each device of the slot is handed out whole, one per request


class WorkloadType(enum.StrEnum):
    """What kind of thing a workload is."""

    CONTAINER = "container"
    PROCESS_TREE = "process_tree"


class MountType(enum.StrEnum):
    """A bind mount of a path, or a device node."""

    BIND = "bind"
    DEVICE = "device"


#: each workload type by its text (and by itself: a member hashes and compares as its text)
_WORKLOAD_TYPES = {kind.value: kind for kind in WorkloadType}


def _workload_type(value: str) -> WorkloadType:
    """``WorkloadType(value)``, with one look-up for a type or its text (the ledger makes a
    workload for each of thousands of records)."""
    try:
        return _WORKLOAD_TYPES[value]
    except (KeyError, TypeError):  # not a type's text (nor hashable): the enum's own error
        return WorkloadType(value)


def _non_empty(_inst: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not value:
        msg = f"{attribute.name} must not be empty"
        raise ValueError(msg)


def _frozen_str_map(value: Mapping[Any, Any] | None) -> Mapping[str, str]:
    """An immutable, hashable copy; a ``dict`` subclass, so JSON and ``attrs.asdict`` take it."""
    return value if isinstance(value, frozendict) else frozendict(value or {})


def _optional_bool(value: object) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    msg = f"divisible must be True, False or None, got {value!r}"
    raise TypeError(msg)


def _optional_quantum(value: object) -> Decimal | None:
    return None if value is None else to_decimal(value)


@attrs.frozen(repr=False)
class SlotSpec:
    """A slot type a plugin can report: its kind, and display metadata.

    ``divisible`` is the slot's kind. ``False``: the slot is *whole*, granted in whole units
    only, each unit to one workload at a time (whole GPUs, MIG instances, cores); a request
    for a fraction of it is refused. ``True``: it is *divisible*, granted in multiples of
    ``quantum`` (GPU shares; memory, whose quantum is one byte). ``None`` (not declared, as
    in plugins written before slot kinds): the kind follows from the slot type and the alloc
    map the plugin builds, as it always did, see :func:`derived_divisible`.

    ``quantum`` is for divisible slots only; ``None`` there means the quantum of the
    plugin's alloc map (1 for a discrete map).
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    name: SlotName = attrs.field(validator=_non_empty)
    type: SlotType = attrs.field(converter=SlotType)
    display_name: str = ""
    display_unit: str = ""
    description: str = ""
    divisible: bool | None = attrs.field(default=None, converter=_optional_bool, kw_only=True)
    quantum: Decimal | None = attrs.field(default=None, converter=_optional_quantum, kw_only=True)

    @divisible.validator
    def _check_divisible(
        self, _attribute: attrs.Attribute[bool | None], value: bool | None
    ) -> None:
        if value and self.type is SlotType.UNIQUE:
            msg = f"slot {self.name!r} is UNIQUE (handed out whole) and cannot be divisible"
            raise ValueError(msg)

    @quantum.validator
    def _check_quantum(
        self, _attribute: attrs.Attribute[Decimal | None], value: Decimal | None
    ) -> None:
        if value is None:
            return
        if self.divisible is not True:
            msg = f"slot {self.name!r}: only a divisible slot has a quantum (set divisible=True)"
            raise ValueError(msg)
        if value <= 0 or not amount_in_range(value):
            msg = f"slot {self.name!r}: the quantum must be a positive amount, got {value}"
            raise ValueError(msg)

    @property
    def whole(self) -> bool:
        """Whether the slot is declared whole (``divisible=False``) or is UNIQUE."""
        return self.divisible is False or self.type is SlotType.UNIQUE


def derived_divisible(slot_type: SlotType, fractional_map: bool) -> bool:
    """The kind of a slot whose :class:`SlotSpec` does not declare one (``divisible=None``).

    As before slot kinds were declared: a UNIQUE slot is whole; a BYTES slot is divisible; a
    COUNT slot is whole in a discrete map and divisible (by the map's quantum) in a fraction
    map. Declare ``divisible`` to leave nothing to this rule.
    """
    if slot_type is SlotType.UNIQUE:
        return False
    return slot_type is SlotType.BYTES or fractional_map


@attrs.frozen(repr=False)
class ComputeDevice:
    """One device of a node as its plugin discovered it."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    device_name: DeviceName = attrs.field(validator=_non_empty)
    device_id: DeviceId = attrs.field(validator=_non_empty)
    hw_location: str
    numa_node: int | None
    memory_size: int = attrs.field(validator=attrs.validators.ge(0))
    processing_units: int = attrs.field(validator=attrs.validators.ge(0))
    model_name: str = ""
    uuid: str | None = None
    extra: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_str_map, eq=False)


@attrs.frozen(repr=False)
class DeviceSlotInfo:
    """The capacity one device contributes to one slot."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    slot_type: SlotType = attrs.field(converter=SlotType)
    slot_name: SlotName = attrs.field(validator=_non_empty)
    amount: Decimal = attrs.field(converter=to_decimal)
    numa_node: int | None = None

    @amount.validator
    def _check_amount(self, _attribute: attrs.Attribute[Decimal], value: Decimal) -> None:
        if value < 0:
            msg = f"slot {self.slot_name!r}: capacity must not be negative, got {value}"
            raise ValueError(msg)
        if not amount_in_range(value):
            msg = f"slot {self.slot_name!r}: capacity {range_problem(value)}"
            raise ValueError(msg)


@attrs.frozen(repr=False)
class Workload:
    """A container or process tree that devices are allocated to."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    id: str = attrs.field(validator=_non_empty)
    type: WorkloadType = attrs.field(converter=_workload_type, default=WorkloadType.PROCESS_TREE)

    @classmethod
    def process_tree(cls, workload_id: str) -> Workload:
        return cls(workload_id, WorkloadType.PROCESS_TREE)

    @classmethod
    def container(cls, workload_id: str) -> Workload:
        return cls(workload_id, WorkloadType.CONTAINER)


@attrs.frozen(repr=False)
class Mount:
    """A path bound into a workload, or a device node exposed to it."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    source: str
    target: str
    type: MountType = attrs.field(converter=MountType, default=MountType.BIND)
    read_only: bool = False

    @classmethod
    def device(cls, path: str) -> Mount:
        """A device node exposed at the same path inside the workload."""
        return cls(path, path, MountType.DEVICE, read_only=False)


def _tuple_of_str(value: Iterable[Any] | None) -> tuple[str, ...]:
    return tuple(str(v) for v in (value or ()))


def _tuple_of_mounts(value: Iterable[Mount]) -> tuple[Mount, ...]:
    return tuple(value)


def _tuple_of_int(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


def _optional_tuple_of_int(value: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if value is None else _tuple_of_int(value)


@attrs.frozen(repr=False)
class WorkloadConfig:
    """What a lifecycle hook asks of a workload's creation; every field is optional."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    mounts: tuple[Mount, ...] = attrs.field(default=(), converter=_tuple_of_mounts)
    env_vars: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_str_map)
    resource_data: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_str_map)
    networks: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    extra_gids: tuple[int, ...] = attrs.field(default=(), converter=_tuple_of_int)
    extra_syscalls: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    cdi_devices: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    cpuset_cpus: tuple[int, ...] | None = attrs.field(
        default=None, converter=_optional_tuple_of_int
    )
    cpuset_mems: tuple[int, ...] | None = attrs.field(
        default=None, converter=_optional_tuple_of_int
    )
    memory_limit: int | None = None


@attrs.frozen(repr=False)
class NodeInfo:
    """Driver and runtime versions and hardware facts, all as strings."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    driver_version: str = ""
    runtime_version: str = ""
    facts: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_str_map)
