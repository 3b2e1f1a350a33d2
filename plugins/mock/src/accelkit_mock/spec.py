"""The mock device declaration format: kinds of devices in TOML, from a file or inline.

```toml
[[kinds]]
key = "cuda"              # "cpu" -> slot "cpu"; "mem" -> slot "mem" (bytes, one device "root")
allocation = "discrete"   # otherwise "discrete" -> "<key>.device", "fractional" -> "<key>.shares"
quantum = "0.01"          # fractional only
[[kinds.devices]]
id = "cuda0"
model = "Mock GPU 40G"
numa-node = 0
memory = "40G"
processing-units = 108
amount = "1"              # capacity in its slot; for key "mem" the byte size
mig-profile = ""          # non-empty -> a UNIQUE slot "<key>.mig-<profile>"
slot = "device"           # the slot "<key>.<slot>" (default "device" or "shares", as above)
divisible = false         # the slot's kind: whole (false) or divisible by the quantum (true);
                          # default: true for "fractional" kinds (but "cpu") and "mem"
health = "healthy"        # or "degraded", "unhealthy", "unknown"; re-read while running
health-reason = ""        # why, shown by 'accelkit devices' and 'accelkit status'
device-node = ""          # a device node path a container of the device is given (none if "")
parent = ""               # a MIG-like device: the id of the GPU it is carved from (as NVML says)
```

``[plugins.config.mock] health-interval = "1"`` is how often (seconds) ``watch_health()`` looks
at the device file for changes; ``gpu-metrics = true`` makes every accelerator kind play the
cuda plugin's metrics and GPU identity too (see :mod:`accelkit_mock.metrics`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import attrs

from accelkit import ConfigError, parse_binary_size
from accelkit.config import (
    BYTE_SIZE,
    MISSING,
    NON_NEGATIVE_INT,
    SECONDS,
    KeyPath,
    Rule,
    attrs_eq,
    attrs_hash,
    attrs_repr,
    format_key,
    positive_decimal,
    raise_all,
    read_toml,
    structure,
)
from accelkit.types import amount_in_range, is_multiple, range_problem, to_decimal

ALLOCATIONS = ("discrete", "fractional")
HEALTH_STATES = ("healthy", "degraded", "unhealthy", "unknown")
_KEY = re.compile(r"[a-z][a-z0-9_-]*")
_PROFILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]*")
_SLOT = re.compile(r"[a-z0-9][a-z0-9._-]*")
_NEEDS_KEY = "a kind needs a lower-case key such as 'cuda'"


def _kind_key(value: Any) -> str:
    if not isinstance(value, str) or not _KEY.fullmatch(value):
        msg = f"{_NEEDS_KEY}, got {value!r}"
        raise ValueError(msg)
    return value


def _allocation(value: Any) -> str:
    if value not in ALLOCATIONS:
        msg = f"unknown allocation mode {value!r} (use {' or '.join(map(repr, ALLOCATIONS))})"
        raise ValueError(msg)
    return str(value)


def _device_id(value: Any) -> str:
    if not isinstance(value, str) or not value:
        msg = f"device id must be a non-empty string, got {value!r}"
        raise ValueError(msg)
    if not value.isprintable() or any(c.isspace() or c == "," for c in value):
        # ids are listed comma-separated in MOCK_<KEY>_DEVICES, one per line in the plan
        msg = f"device id must have no spaces, commas or control characters, got {value!r}"
        raise ValueError(msg)
    return value


def _numa_node(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        msg = f"expected a NUMA node number, got {value!r}"
        raise ValueError(msg)
    return value


def _amount_text(value: Any) -> int | str:
    """Kept as written: its meaning (bytes or a decimal amount) depends on the kind."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        msg = f"expected an amount as an integer or a string, got {value!r}"
        raise ValueError(msg)
    return value


def _slot(value: Any) -> str:
    if not isinstance(value, str) or not _SLOT.fullmatch(value) or value.startswith("mig-"):
        msg = (
            "a slot is named by lower-case letters, digits, '.', '_' and '-' (such as "
            f"'device' or 'shares'; 'mig-' names MIG profiles), got {value!r}"
        )
        raise ValueError(msg)
    return value


def _divisible(value: Any) -> bool:
    if not isinstance(value, bool):
        msg = f"expected true or false, got {value!r}"
        raise ValueError(msg)
    return value


def _health(value: Any) -> str:
    if value not in HEALTH_STATES:
        msg = f"unknown health {value!r} (use one of {', '.join(HEALTH_STATES)})"
        raise ValueError(msg)
    return str(value)


def _profile(value: Any) -> str:
    if not isinstance(value, str) or (value and not _PROFILE.fullmatch(value)):
        msg = f"not a profile name: {value!r}"
        raise ValueError(msg)
    return value


@attrs.frozen(repr=False)
class DeviceEntry:
    """``[[kinds.devices]]`` as written; ``id`` may be left out for kind ``mem`` only."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    id: Annotated[str | None, Rule(_device_id)] = None
    model: str | None = None
    numa_node: Annotated[int | None, Rule(_numa_node)] = None
    memory: Annotated[int, BYTE_SIZE] = 0
    processing_units: Annotated[int, NON_NEGATIVE_INT] = 0
    amount: Annotated[int | str | None, Rule(_amount_text)] = None
    mig_profile: Annotated[str, Rule(_profile)] = ""
    health: Annotated[str, Rule(_health)] = "healthy"
    health_reason: str = ""
    device_node: str = ""
    parent: str = ""
    slot: Annotated[str | None, Rule(_slot)] = None
    divisible: Annotated[bool | None, Rule(_divisible)] = None


@attrs.frozen(repr=False)
class KindEntry:
    """``[[kinds]]`` as written."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    key: Annotated[str, Rule(_kind_key)] = attrs.field(metadata={MISSING: _NEEDS_KEY})
    allocation: Annotated[str, Rule(_allocation)] = "discrete"
    quantum: Annotated[Decimal, positive_decimal("0.01")] = Decimal("0.01")
    devices: tuple[DeviceEntry, ...] = ()


@attrs.frozen(repr=False)
class DeviceFile:
    """A mock device file: ``[[kinds]]`` tables only."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    kinds: tuple[KindEntry, ...] = ()


@attrs.frozen(repr=False)
class MockConfig:
    """``[plugins.config.mock]``: a device file, or the same ``[[kinds]]`` inline."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    config_file: str | None = None
    kinds: tuple[KindEntry, ...] = ()
    health_interval: Annotated[Decimal, SECONDS] = Decimal(1)
    gpu_metrics: bool = False


@attrs.frozen(repr=False)
class MockDevice:
    """One declared device."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    id: str
    model: str
    numa_node: int | None
    memory: int
    processing_units: int
    amount: Decimal
    mig_profile: str = ""
    health: str = "healthy"
    health_reason: str = ""
    device_node: str = ""
    slot: str = "device"
    divisible: bool = False
    parent: str = ""


@attrs.frozen(repr=False)
class MockKind:
    """One declared kind of device, played by its own plugin instance."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    key: str
    allocation: str
    quantum: Decimal
    devices: tuple[MockDevice, ...]


Problem = tuple[KeyPath, str]


def _amount(kind: KindEntry, entry: DeviceEntry, at: KeyPath) -> Decimal:
    """The device's capacity in its slot: bytes for ``mem``, else a decimal amount."""
    if kind.key == "mem":
        amount = Decimal(entry.memory if entry.amount is None else parse_binary_size(entry.amount))
    else:
        try:
            amount = to_decimal("1" if entry.amount is None else entry.amount)
        except (TypeError, ValueError) as exc:
            raise _Refused((*at, "amount"), str(exc)) from None  # it says what it was given
        if amount < 0:
            raise _Refused((*at, "amount"), f"amount must not be negative, got {entry.amount!r}")
    if not amount_in_range(amount):  # no device's capacity could be booked in the ledger
        key = "memory" if kind.key == "mem" and entry.amount is None else "amount"
        raise _Refused((*at, key), range_problem(amount))
    return amount


class _Refused(Exception):
    def __init__(self, path: KeyPath, message: str) -> None:
        super().__init__(message)
        self.problem: Problem = (path, message)


def _device(kind: KindEntry, entry: DeviceEntry, at: KeyPath) -> MockDevice:
    if entry.id is None and kind.key != "mem":
        raise _Refused((*at, "id"), "every device needs an id")
    try:
        amount = _amount(kind, entry, at)
    except ValueError as exc:  # a mem amount that is not a size
        raise _Refused((*at, "amount"), str(exc)) from None
    if kind.key in ("cpu", "mem") and entry.slot is not None:
        raise _Refused((*at, "slot"), f"kind {kind.key!r} has the one slot {kind.key!r}")
    if entry.mig_profile and entry.slot is not None:
        raise _Refused((*at, "slot"), "a MIG-like device's slot is named by its mig-profile")
    default_slot = "shares" if kind.allocation == "fractional" else "device"
    divisible = entry.divisible
    if divisible is None:  # as before kinds were declared
        fractional = kind.allocation == "fractional" and kind.key != "cpu"
        divisible = kind.key == "mem" or (fractional and not entry.mig_profile)
    return MockDevice(
        entry.id or "root",
        entry.model if entry.model is not None else f"Mock {kind.key}",
        entry.numa_node,
        entry.memory,
        entry.processing_units,
        amount,
        entry.mig_profile,
        entry.health,
        entry.health_reason,
        entry.device_node,
        entry.slot or default_slot,
        divisible,
        entry.parent,
    )


def _kind_problems(device: MockDevice, kind: KindEntry) -> Iterator[tuple[str, str]]:
    """What is wrong with a device's slot kind, as ``(key, problem)``."""
    if device.divisible and (device.mig_profile or kind.key == "cpu"):
        what = "a MIG-like device" if device.mig_profile else "a core"
        yield "divisible", f"{what} is handed out whole: divisible = false"
    if not device.divisible and kind.key == "mem":
        yield "divisible", "memory is divisible to the byte: divisible = true"
    whole_amount = device.amount == device.amount.to_integral_value()
    if not device.divisible and kind.allocation == "fractional" and not whole_amount:
        yield "amount", "a device of a whole slot (divisible = false) has a whole amount"


def _device_problems(
    kind: KindEntry, devices: Sequence[tuple[int, MockDevice]], at: KeyPath
) -> Iterator[Problem]:
    kinds: dict[str, tuple[bool, str]] = {}
    for i, device in devices:
        here = (*at, "devices", i)
        for key, problem in _kind_problems(device, kind):
            yield (*here, key), problem
        slot = f"mig-{device.mig_profile}" if device.mig_profile else device.slot
        first = kinds.setdefault(slot, (device.divisible, device.id))
        if first[0] != device.divisible:
            words = {True: "divisible", False: "whole"}
            msg = (
                f"device {first[1]!r} makes slot '{kind.key}.{slot}' {words[first[0]]}, this "
                f"device makes it {words[device.divisible]}: a slot has one kind"
            )
            yield (*here, "divisible"), msg
        if device.mig_profile and kind.key in ("cpu", "mem"):
            yield (*here, "mig-profile"), f"kind {kind.key!r} cannot have MIG profiles"
        if device.mig_profile and device.amount != 1:
            yield (*here, "amount"), "a MIG-like device is handed out whole: amount 1"
        if kind.allocation == "fractional" and not is_multiple(device.amount, kind.quantum):
            msg = f"amount {device.amount} is not a multiple of quantum {kind.quantum}"
            yield (*here, "amount"), msg
        if kind.allocation == "discrete" and device.amount != device.amount.to_integral_value():
            yield (*here, "amount"), "a discrete device's amount must be whole"
    if kind.key == "mem" and [d.id for _i, d in devices] not in ([], ["root"]):
        yield (*at, "devices"), "kind 'mem' has exactly one device, 'root'"


def _kind(
    entry: KindEntry, entries: Sequence[tuple[int, DeviceEntry]], at: KeyPath
) -> tuple[MockKind, list[Problem]]:
    devices: list[tuple[int, MockDevice]] = []
    problems: list[Problem] = []
    for i, raw in entries:
        try:
            devices.append((i, _device(entry, raw, (*at, "devices", i))))
        except _Refused as refused:
            problems.append(refused.problem)
    problems.extend(_device_problems(entry, devices, at))
    kind = MockKind(entry.key, entry.allocation, entry.quantum, tuple(d for _i, d in devices))
    return kind, problems


def _duplicate_ids(raw_devices: Sequence[Any], at: KeyPath) -> Iterator[Problem]:
    """Ids given twice, read from the file as written so that a device with another problem
    still counts."""
    seen: set[str] = set()
    for i, raw in enumerate(raw_devices):
        device_id = raw.get("id", "root") if isinstance(raw, Mapping) else None
        if not isinstance(device_id, str):
            continue
        if device_id in seen:
            yield (*at, "devices", i, "id"), f"duplicate device id {device_id!r}"
        seen.add(device_id)


def _kind_entry(item: Any) -> tuple[KindEntry, list[tuple[int, DeviceEntry]]] | None:
    """The kind and, by index, its devices that are well-formed on their own.

    Problems of the others are reported by the pass over the whole file; reading the devices
    one by one means one bad device never hides the problems of the rest.
    """
    if not isinstance(item, Mapping):
        return None
    raw_devices = item.get("devices", [])
    header, _errors = structure({**item, "devices": []}, KindEntry, file=None)
    if header is None or not isinstance(raw_devices, list):
        return None
    read = [(i, structure(d, DeviceEntry, file=None)[0]) for i, d in enumerate(raw_devices)]
    return header, [(i, d) for i, d in read if d is not None]


def read_kinds(raw: Any, file: str | None) -> tuple[tuple[MockKind, ...], list[ConfigError]]:
    """The kinds of a ``[[kinds]]`` array and every problem found in it, keyed ``kinds[i]…``.

    Each kind and each device is read on its own, so a problem in one never hides those of
    the others.
    """
    whole, errors = structure({"kinds": raw}, DeviceFile, file=file)
    kinds: list[MockKind] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    # a file read whole without a problem is not read again kind by kind, device by device
    well_formed = whole.kinds if whole is not None and not errors else None
    for i, item in enumerate(raw if isinstance(raw, list) else ()):
        if well_formed is not None:
            read = well_formed[i], list(enumerate(well_formed[i].devices))
        elif (parts := _kind_entry(item)) is not None:
            read = parts
        else:
            continue
        entry, devices = read
        if entry.key in seen:
            problems.append((("kinds", i, "key"), f"kind {entry.key!r} is declared twice"))
        seen.add(entry.key)
        kind, kind_problems = _kind(entry, devices, ("kinds", i))
        kinds.append(kind)
        problems += kind_problems
        problems += _duplicate_ids(item.get("devices", []), ("kinds", i))
    errors += [ConfigError(message, file=file, key=format_key(path)) for path, message in problems]
    return tuple(kinds), errors


def _load_file(path: Path) -> tuple[MockKind, ...]:
    try:
        data, text = read_toml(path, "the mock device file", key="config-file")
    except ConfigError as exc:
        if exc.line is not None or not exc.message.startswith("cannot read"):
            raise
        # no file to read: the key is what is wrong, an error of the host config that holds it
        said = exc.message.replace("the mock device file", f"the mock device file {str(path)!r}")
        raise ConfigError(said, key="config-file") from None
    file = str(path)
    errors = [
        ConfigError("unknown key (a mock device file holds [[kinds]] only)", file=file, key=key)
        for key in sorted(set(data) - {"kinds"})
    ]
    kinds, kind_errors = read_kinds(data.get("kinds", []), file)
    if errors or kind_errors:  # the lines' scanner is imported where there are errors
        from accelkit.config import with_lines

        raise_all(with_lines([*errors, *kind_errors], text))
    return kinds


def load_kinds(config: Mapping[str, Any]) -> tuple[MockKind, ...]:
    """Read the kinds from ``config-file`` or from an inline ``kinds`` array.

    Raises:
        ConfigError: every problem at once (:class:`~accelkit.errors.ConfigErrors`), each
            naming the device file and its key, or for inline kinds the key within
            ``[plugins.config.mock]``.
    """
    known = {"config-file", "kinds", "health-interval", "gpu-metrics"}
    unknown = sorted(set(config) - known)
    allowed = "unknown key (allowed: config-file, kinds, health-interval, gpu-metrics)"
    errors = [ConfigError(allowed, key=key) for key in unknown]
    if not isinstance(config.get("gpu-metrics", False), bool):
        msg = f"expected true or false, got {config['gpu-metrics']!r}"
        errors.append(ConfigError(msg, key="gpu-metrics"))
    if "config-file" in config and "kinds" in config:
        errors.append(
            ConfigError("give either 'config-file' or inline 'kinds', not both", key="config-file")
        )
    raise_all(errors)
    if "config-file" not in config:
        kinds, errors = read_kinds(config.get("kinds", []), None)
        raise_all(errors)
        return kinds
    path = config["config-file"]
    if not isinstance(path, str) or not path:
        msg = f"expected a file path, got {path!r}"
        raise ConfigError(msg, key="config-file")
    return _load_file(Path(path))
