"""Plugin records and the contract checks that keep plugins apart (DESIGN §4)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import pluggy

from accelkit.errors import PluginContractError
from accelkit.plugin import AbstractComputePlugin, PluginRole
from accelkit.reprs import attrs_repr
from accelkit.types import ComputeDevice, DeviceName, SlotName

__all__ = [
    "HookFunctions",
    "KeyRegister",
    "PluginRecord",
    "PluginStatus",
    "check_plugin_object",
    "check_slots",
    "hook_of",
    "one_result",
    "origin",
    "slot_belongs",
]


class PluginStatus(enum.StrEnum):
    """How loading a plugin distribution ended."""

    LOADED = "loaded"
    UNAVAILABLE = "unavailable"  # hardware, driver or library absent: not an error
    FAILED = "failed"  # raised on import, init or discovery, or broke the contract
    BLOCKED = "blocked"  # excluded by the host config or the environment


@attrs.define(repr=False)
class PluginRecord:
    """One plugin distribution, as registered under its entry-point name.

    ``identify``, where given, tells the distribution's name and version when they are first
    asked for: reading an installed distribution's metadata costs a parse of its metadata
    file, which a command that never shows them (``run``) should not pay for every plugin.
    """

    __repr__ = attrs_repr

    name: str
    _distribution: str = attrs.field(default="", alias="distribution")
    _version: str = attrs.field(default="", alias="version")
    status: PluginStatus = PluginStatus.LOADED
    error: str | None = None
    traceback: str | None = None
    plugins: list[AbstractComputePlugin] = attrs.field(factory=list)
    _identify: Callable[[], tuple[str, str]] | None = attrs.field(
        default=None, kw_only=True, repr=False, eq=False, alias="identify"
    )

    def _identified(self) -> None:
        if (identify := self._identify) is not None:
            self._identify = None
            self._distribution, self._version = identify()

    @property
    def distribution(self) -> str:
        """The name of the distribution that declares the entry point ("" if unknown)."""
        self._identified()
        return self._distribution

    @property
    def version(self) -> str:
        """The distribution's version ("" if unknown)."""
        self._identified()
        return self._version

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


def hook_of(pm: pluggy.PluginManager, hook: str, plugin_name: str) -> pluggy.HookCaller:
    """The hook ``hook`` as only ``plugin_name`` implements it, with every wrapper kept.

    Calls go through pluggy (``pm.hook``), so ``wrapper=True`` observers and tracing see each
    call, while each distribution is still called, timed and judged on its own.
    """
    others = {
        impl.plugin
        for impl in getattr(pm.hook, hook).get_hookimpls()
        if impl.plugin_name != plugin_name and not (impl.wrapper or impl.hookwrapper)
    }
    return pm.subset_hook_caller(hook, others)


def one_result(results: list[Any]) -> Any:
    """The single implementation's result (a wrapper may have replaced the list)."""
    return results[0] if results else None


class HookFunctions:
    """A hashable holder of an unhashable object's hook functions (a ``SimpleNamespace``):
    pluggy keeps plugins in sets when it calls a subset of them."""

    def __init__(self, source: object) -> None:
        self.__dict__.update(vars(source))


def slot_belongs(key: str, role: PluginRole, slot: str) -> bool:
    """Whether a plugin with ``key`` and ``role`` may offer ``slot``: the bare ``cpu`` only
    the cores plugin, ``mem`` only the memory plugin, any other slot as ``key.*``."""
    if (owner := PluginRole.of_bare_slot(slot)) is not None:
        return owner is role
    return slot.startswith(f"{key}.") and len(slot) > len(key) + 1


def origin(record: PluginRecord, plugin: AbstractComputePlugin) -> str:
    """How messages name a plugin: its class and where it came from."""
    where = record.distribution or record.name
    return f"{type(plugin).__name__} (plugin {record.name!r} from {where})"


class KeyRegister:
    """Plugins by key and by role; refuses a key already claimed, and a second plugin of a
    role a node has once (cores, memory)."""

    def __init__(self) -> None:
        self._by_key: dict[DeviceName, tuple[PluginRecord, AbstractComputePlugin]] = {}
        self._by_role: dict[PluginRole, tuple[PluginRecord, AbstractComputePlugin]] = {}

    def add(self, record: PluginRecord, plugins: Sequence[AbstractComputePlugin]) -> None:
        """Register every plugin of ``record``, or none of them when one collides."""
        by_key = dict(self._by_key)
        by_role = dict(self._by_role)
        for plugin in plugins:
            key, role = plugin.key, plugin.role
            if (prev := by_key.get(key)) is not None:
                msg = (
                    f"plugin key {key!r} claimed by both {origin(*prev)} "
                    f"and {origin(record, plugin)}"
                )
                raise PluginContractError(msg)
            if (prev := by_role.get(role)) is not None:
                msg = (
                    f"plugin role {role.value!r} claimed by both {origin(*prev)} and "
                    f"{origin(record, plugin)}; a node has one {role.value} plugin "
                    f"(the one offering slot {role.bare_slot!r})"
                )
                raise PluginContractError(msg)
            by_key[key] = (record, plugin)
            if role is not PluginRole.ACCELERATOR:
                by_role[role] = (record, plugin)
        self._by_key, self._by_role = by_key, by_role

    def owner_of(self, slot: str) -> str | None:
        """Which registered plugin the slot points at (the plugin of a bare slot's role, else
        the plugin of its prefix), for clearer messages."""
        if (role := PluginRole.of_bare_slot(slot)) is not None:
            found = self._by_role.get(role)
            return None if found is None else origin(*found)
        for key, (record, plugin) in self._by_key.items():
            if slot_belongs(key, plugin.role, slot):
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
    role = getattr(plugin, "role", None)
    if not isinstance(role, PluginRole):
        msg = (
            f"{origin(record, plugin)} has no valid 'role' (got {role!r}); set role to one of "
            f"{', '.join(f'PluginRole.{r.name}' for r in PluginRole)}"
        )
        raise PluginContractError(msg)
    return plugin


def check_unique_ids(devices: Iterable[ComputeDevice]) -> None:
    """A plugin lists each device once (a device listed twice would be counted twice)."""
    ids = [d.device_id for d in devices]
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        msg = f"list_devices returned duplicate device ids: {', '.join(twice)}"
        raise PluginContractError(msg)


def check_slots(
    record: PluginRecord,
    plugin: AbstractComputePlugin,
    slots: Iterable[SlotName],
    register: KeyRegister,
) -> None:
    """Every slot a plugin reports must carry its key as prefix, or be the bare slot of its
    role (``cpu`` for the cores plugin, ``mem`` for the memory plugin)."""
    for slot in slots:
        if slot_belongs(plugin.key, plugin.role, slot):
            continue
        if (role := PluginRole.of_bare_slot(slot)) is not None:
            msg = (
                f"{origin(record, plugin)} reports slot {slot!r}, which only the plugin with "
                f"role {role.value!r} offers, but it declares role {plugin.role.value!r}; "
                f"set role = PluginRole.{role.name} or name the slot '{plugin.key}.<slot>'"
            )
        else:
            msg = (
                f"{origin(record, plugin)} reports slot {slot!r}, "
                f"not prefixed by its key {plugin.key!r}"
            )
        if (owner := register.owner_of(slot)) is not None:
            msg += f"; that {'prefix' if role is None else 'slot'} belongs to {owner}"
        raise PluginContractError(msg)
