"""Plugin records and the contract checks that keep plugins apart (DESIGN §4)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

import attrs

from accelkit.errors import PluginContractError
from accelkit.plugin import AbstractComputePlugin
from accelkit.types import DeviceName, SlotName

__all__ = [
    "BARE_SLOTS",
    "KeyRegister",
    "PluginRecord",
    "PluginStatus",
    "check_plugin_object",
    "check_slots",
    "origin",
    "slot_is_prefixed",
]

#: slot names that stand alone instead of being prefixed by their plugin's key
BARE_SLOTS = frozenset({"cpu", "mem"})


class PluginStatus(enum.StrEnum):
    """How loading a plugin distribution ended."""

    LOADED = "loaded"
    UNAVAILABLE = "unavailable"  # hardware, driver or library absent: not an error
    FAILED = "failed"  # raised on import, init or discovery, or broke the contract
    BLOCKED = "blocked"  # excluded by the host config or the environment


@attrs.define
class PluginRecord:
    """One plugin distribution, as registered under its entry-point name."""

    name: str
    distribution: str = ""
    version: str = ""
    status: PluginStatus = PluginStatus.LOADED
    error: str | None = None
    traceback: str | None = None
    plugins: list[AbstractComputePlugin] = attrs.field(factory=list)

    def mark(
        self, status: PluginStatus, error: str | None = None, traceback: str | None = None
    ) -> None:
        self.status = status
        self.error = error
        self.traceback = traceback

    def as_json(self) -> dict[str, Any]:
        """The record as ``accelkit plugins --json`` prints it."""
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": str(self.status),
            "error": self.error,
        }


def slot_is_prefixed(key: str, slot: str) -> bool:
    """Whether ``slot`` belongs to a plugin with ``key``: ``cpu``/``mem`` alone, else ``key.*``."""
    if slot in BARE_SLOTS:
        return slot == key
    return slot.startswith(f"{key}.") and len(slot) > len(key) + 1


def origin(record: PluginRecord, plugin: AbstractComputePlugin) -> str:
    """How messages name a plugin: its class and where it came from."""
    where = record.distribution or record.name
    return f"{type(plugin).__name__} (plugin {record.name!r} from {where})"


class KeyRegister:
    """Plugins by key; refuses a second plugin with a key already claimed."""

    def __init__(self) -> None:
        self._by_key: dict[DeviceName, tuple[PluginRecord, AbstractComputePlugin]] = {}

    def add(self, record: PluginRecord, plugin: AbstractComputePlugin) -> None:
        key = plugin.key
        if (prev := self._by_key.get(key)) is not None:
            msg = f"plugin key {key!r} claimed by both {origin(*prev)} and {origin(record, plugin)}"
            raise PluginContractError(msg)
        self._by_key[key] = (record, plugin)

    def owner_of(self, slot: str) -> str | None:
        """Which registered plugin the slot's prefix points at, for clearer messages."""
        for key, (record, plugin) in self._by_key.items():
            if slot_is_prefixed(key, slot):
                return origin(record, plugin)
        return None


def check_plugin_object(record: PluginRecord, plugin: object) -> AbstractComputePlugin:
    """Refuse anything that is not a compute plugin with a usable key."""
    if not isinstance(plugin, AbstractComputePlugin):
        msg = (
            f"plugin {record.name!r} returned {type(plugin).__name__}, "
            "which is not an AbstractComputePlugin"
        )
        raise PluginContractError(msg)
    key = getattr(plugin, "key", None)
    if not isinstance(key, str) or not key or "." in key:
        msg = f"{origin(record, plugin)} has no valid 'key' (got {key!r}); set key = 'name'"
        raise PluginContractError(msg)
    return plugin


def check_slots(
    record: PluginRecord,
    plugin: AbstractComputePlugin,
    slots: Iterable[SlotName],
    register: KeyRegister,
) -> None:
    """Every slot a plugin reports must carry its key as prefix."""
    for slot in slots:
        if slot_is_prefixed(plugin.key, slot):
            continue
        msg = (
            f"{origin(record, plugin)} reports slot {slot!r}, "
            f"not prefixed by its key {plugin.key!r}"
        )
        if (owner := register.owner_of(slot)) is not None:
            msg += f"; that prefix belongs to {owner}"
        raise PluginContractError(msg)
