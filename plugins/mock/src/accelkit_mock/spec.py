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
```
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn

import attrs

from accelkit.errors import ConfigError
from accelkit.sizes import parse_binary_size
from accelkit.types import to_decimal

ALLOCATIONS = ("discrete", "fractional")
_KIND_KEYS = frozenset({"key", "allocation", "quantum", "devices"})
_DEVICE_KEYS = frozenset(
    {"id", "model", "numa-node", "memory", "processing-units", "amount", "mig-profile"}
)
_KEY = re.compile(r"[a-z][a-z0-9_-]*")
_PROFILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]*")


@attrs.frozen
class MockDevice:
    """One declared device."""

    id: str
    model: str
    numa_node: int | None
    memory: int
    processing_units: int
    amount: Decimal
    mig_profile: str = ""


@attrs.frozen
class MockKind:
    """One declared kind of device, played by its own plugin instance."""

    key: str
    allocation: str
    quantum: Decimal
    devices: tuple[MockDevice, ...]


class _Reader:
    """Validates raw TOML data, naming the file and the key of every problem."""

    def __init__(self, source: str | None) -> None:
        self.source = source

    def fail(self, key: str, message: str) -> NoReturn:
        raise ConfigError(message, file=self.source, key=key)

    def table(self, value: Any, key: str, allowed: frozenset[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            self.fail(key, f"expected a table, got {type(value).__name__}")
        if unknown := sorted(set(value) - allowed):
            self.fail(f"{key}.{unknown[0]}", f"unknown key (allowed: {sorted(allowed)})")
        return value

    def string(self, table: Mapping[str, Any], key: str, where: str, default: str = "") -> str:
        value = table.get(key, default)
        if not isinstance(value, str):
            self.fail(f"{where}.{key}", f"expected a string, got {value!r}")
        return value

    def integer(self, table: Mapping[str, Any], key: str, where: str) -> int:
        value = table.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.fail(f"{where}.{key}", f"expected a non-negative integer, got {value!r}")
        return value

    def size(self, table: Mapping[str, Any], key: str, where: str) -> int:
        try:
            return parse_binary_size(table.get(key, 0))
        except ValueError as exc:
            self.fail(f"{where}.{key}", str(exc))

    def amount(self, value: Any, where: str) -> Decimal:
        try:
            amount = to_decimal(value)
        except (TypeError, ValueError) as exc:
            self.fail(where, f"not a decimal amount: {exc}")
        if amount < 0:
            self.fail(where, f"amount must not be negative, got {value!r}")
        return amount

    def kinds(self, data: Mapping[str, Any]) -> tuple[MockKind, ...]:
        raw = data.get("kinds", [])
        if not isinstance(raw, list):
            self.fail("kinds", "expected an array of tables [[kinds]]")
        kinds = tuple(self.kind(item, f"kinds[{i}]") for i, item in enumerate(raw))
        seen: set[str] = set()
        for i, kind in enumerate(kinds):
            if kind.key in seen:
                self.fail(f"kinds[{i}].key", f"kind {kind.key!r} is declared twice")
            seen.add(kind.key)
        return kinds

    def kind(self, raw: Any, where: str) -> MockKind:
        table = self.table(raw, where, _KIND_KEYS)
        key = self.string(table, "key", where)
        if not _KEY.fullmatch(key):
            self.fail(f"{where}.key", f"a kind needs a lower-case key such as 'cuda', got {key!r}")
        allocation = self.string(table, "allocation", where, "discrete")
        if allocation not in ALLOCATIONS:
            self.fail(
                f"{where}.allocation", f"unknown allocation mode {allocation!r} (use {ALLOCATIONS})"
            )
        quantum = self.amount(table.get("quantum", "0.01"), f"{where}.quantum")
        if quantum <= 0:
            self.fail(f"{where}.quantum", "quantum must be greater than zero")
        raw_devices = table.get("devices", [])
        if not isinstance(raw_devices, list):
            self.fail(f"{where}.devices", "expected an array of tables [[kinds.devices]]")
        devices = tuple(
            self.device(key, d, f"{where}.devices[{i}]") for i, d in enumerate(raw_devices)
        )
        self.check_devices(key, allocation, quantum, devices, where)
        return MockKind(key, allocation, quantum, devices)

    def device(self, key: str, raw: Any, where: str) -> MockDevice:
        table = self.table(raw, where, _DEVICE_KEYS)
        if "id" not in table:
            if key != "mem":
                self.fail(f"{where}.id", "every device needs an id")
            table = {**table, "id": "root"}
        device_id = self.string(table, "id", where)
        if not device_id:
            self.fail(f"{where}.id", "device id must not be empty")
        numa = table.get("numa-node")
        if numa is not None and (isinstance(numa, bool) or not isinstance(numa, int) or numa < 0):
            self.fail(f"{where}.numa-node", f"expected a NUMA node number, got {numa!r}")
        memory = self.size(table, "memory", where)
        if key == "mem":
            amount = Decimal(self.size(table, "amount", where) if "amount" in table else memory)
        else:
            amount = self.amount(table.get("amount", "1"), f"{where}.amount")
        profile = self.string(table, "mig-profile", where)
        if profile and not _PROFILE.fullmatch(profile):
            self.fail(f"{where}.mig-profile", f"not a profile name: {profile!r}")
        return MockDevice(
            device_id,
            self.string(table, "model", where, f"Mock {key}"),
            numa,
            memory,
            self.integer(table, "processing-units", where),
            amount,
            profile,
        )

    def check_devices(
        self,
        key: str,
        allocation: str,
        quantum: Decimal,
        devices: Sequence[MockDevice],
        where: str,
    ) -> None:
        seen: set[str] = set()
        for i, device in enumerate(devices):
            at = f"{where}.devices[{i}]"
            if device.id in seen:
                self.fail(f"{at}.id", f"duplicate device id {device.id!r}")
            seen.add(device.id)
            if device.mig_profile and key in ("cpu", "mem"):
                self.fail(f"{at}.mig-profile", f"kind {key!r} cannot have MIG profiles")
            if device.mig_profile and device.amount != 1:
                self.fail(f"{at}.amount", "a MIG-like device is handed out whole: amount 1")
            if allocation == "fractional" and (device.amount % quantum) != 0:
                self.fail(
                    f"{at}.amount", f"amount {device.amount} is not a multiple of quantum {quantum}"
                )
            if allocation == "discrete" and device.amount != device.amount.to_integral_value():
                self.fail(f"{at}.amount", "a discrete device's amount must be whole")
        if key == "mem" and [d.id for d in devices] not in ([], ["root"]):
            self.fail(f"{where}.devices", "kind 'mem' has exactly one device, 'root'")


def load_kinds(config: Mapping[str, Any]) -> tuple[MockKind, ...]:
    """Read the kinds from ``config-file`` or from an inline ``kinds`` array.

    Raises:
        ConfigError: naming the file (or the plugin section) and the offending key.
    """
    unknown = sorted(set(config) - {"config-file", "kinds"})
    if unknown:
        msg = "unknown key in the mock plugin's config (allowed: 'config-file', 'kinds')"
        raise ConfigError(msg, file="[plugins.config.mock]", key=unknown[0])
    if "config-file" in config and "kinds" in config:
        msg = "give either 'config-file' or inline 'kinds', not both"
        raise ConfigError(msg, file="[plugins.config.mock]", key="config-file")
    if "config-file" not in config:
        return _Reader("[plugins.config.mock]").kinds(config)
    path = Path(str(config["config-file"]))
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        msg = f"cannot read the mock device file: {exc.strerror or exc}"
        raise ConfigError(msg, file=str(path), key="config-file") from None
    except tomllib.TOMLDecodeError as exc:
        msg = f"malformed TOML: {exc}"
        raise ConfigError(msg, file=str(path)) from None
    reader = _Reader(str(path))
    if unknown := sorted(set(data) - {"kinds"}):
        reader.fail(unknown[0], "unknown key (a mock device file holds [[kinds]] only)")
    return reader.kinds(data)
