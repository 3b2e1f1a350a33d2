"""Plugin records, the contract checks that keep plugins apart (DESIGN §4), and the installed
entry points of the ``accelkit`` group."""

from __future__ import annotations

import enum
import os
import re
import sys
from collections.abc import Iterable, Sequence
from importlib import import_module
from importlib.machinery import PathFinder
from typing import Any, Protocol

import attrs
import pluggy

from accelkit.errors import PluginContractError
from accelkit.plugin import AbstractComputePlugin, PluginRole
from accelkit.types import ComputeDevice, DeviceName, SlotName

__all__ = [
    "EntryPointLike",
    "HookFunctions",
    "KeyRegister",
    "PluginRecord",
    "PluginStatus",
    "check_plugin_object",
    "check_slots",
    "entry_points",
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


# -- installed entry points -------------------------------------------------------------------


class DistributionLike(Protocol):
    """What accelkit reads of an entry point's distribution."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...


class EntryPointLike(Protocol):
    """What accelkit reads of an installed entry point (``importlib.metadata.EntryPoint``'s)."""

    @property
    def name(self) -> str: ...

    @property
    def value(self) -> str: ...

    @property
    def dist(self) -> DistributionLike | None: ...

    def load(self) -> Any: ...


class _Distribution:
    __slots__ = ("name", "version")

    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version


#: ``module``, ``package.module:object.attribute`` and optional ``[extras]``, as
#: ``importlib.metadata.EntryPoint.pattern``
_VALUE = r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$"


class _EntryPoint:
    __slots__ = ("dist", "group", "name", "value")

    def __init__(self, name: str, value: str, group: str, dist: _Distribution) -> None:
        self.name, self.value, self.group, self.dist = name, value, group, dist

    def __repr__(self) -> str:
        return f"EntryPoint(name={self.name!r}, value={self.value!r}, group={self.group!r})"

    def load(self) -> Any:
        """The module the value names, or the object it names in that module."""
        match = re.match(_VALUE, self.value)
        if match is None:
            msg = f"entry point {self.name!r}: {self.value!r} names no module or object"
            raise ValueError(msg)
        found: Any = import_module(match.group("module"))
        for attribute in filter(None, (match.group("attr") or "").split(".")):
            found = getattr(found, attribute)
        return found


_INFO = (".dist-info", ".egg-info")


class _Unread(Exception):
    """Something only ``importlib.metadata`` reads (a zip on the path, another finder, an egg,
    metadata written unusually): it reads all of it instead."""


def entry_points(group: str) -> Sequence[EntryPointLike]:
    """The installed entry points of ``group``, as ``importlib.metadata.entry_points(group=...)``
    finds them: the distributions of each ``sys.path`` directory in its order, one per name.

    Where ``sys.path`` holds directories only, the directories' ``.dist-info`` and ``.egg-info``
    are read here, without importing ``importlib.metadata`` (a tenth of a short command's
    start-up: its email, zip and CSV readers); anything else is left to it.
    """
    try:
        return _scan(group)
    except _Unread:
        from importlib.metadata import entry_points as installed

        return list(installed(group=group))


def _scan(group: str) -> list[EntryPointLike]:
    if any(
        getattr(finder, "find_distributions", None) is not None and finder is not PathFinder
        for finder in sys.meta_path
    ):
        raise _Unread
    found: list[EntryPointLike] = []
    seen: set[str] = set()
    for entry in sys.path:
        for name, path in _distributions(entry):
            if name not in seen:
                seen.add(name)
                found.extend(_entry_points_of(path, group))
    return found


def _distributions(entry: object) -> list[tuple[str, str]]:
    """The normalized name and path of every distribution in the ``sys.path`` entry, grouped by
    name in the order of their first appearance (as ``importlib.metadata``'s lookup)."""
    if not isinstance(entry, str) or os.path.basename(entry).lower().endswith(".egg"):
        raise _Unread
    root = entry or "."
    try:
        children = os.listdir(root)
    except OSError:
        if os.path.exists(root):  # a zip archive
            raise _Unread from None
        return []
    by_name: dict[str, list[str]] = {}
    for child in children:
        if not child.lower().endswith(_INFO):
            continue
        if not child.endswith(_INFO):
            raise _Unread  # named by its metadata then, not by its directory
        name = child.lower().rpartition(".")[0].partition("-")[0]
        normalized = re.sub(r"[-_.]+", "-", name).replace("-", "_")
        by_name.setdefault(normalized, []).append(os.path.join(root, child))
    return [(name, path) for name, paths in by_name.items() for path in paths]


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return None


def _entry_points_of(path: str, group: str) -> list[EntryPointLike]:
    """The distribution's entry points of ``group`` (its ``entry_points.txt``)."""
    text = _read(os.path.join(path, "entry_points.txt"))
    section: str | None = None
    pairs: list[tuple[str, str]] = []
    for line in map(str.strip, (text or "").splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
        elif section is not None:
            name, sep, value = line.partition("=")
            if not sep:
                raise _Unread  # importlib.metadata refuses it (ValueError)
            if section == group:
                pairs.append((name.strip(), value.strip()))
    if not pairs:
        return []
    dist = _distribution(path)
    return [_EntryPoint(name, value, group, dist) for name, value in pairs]


def _distribution(path: str) -> _Distribution:
    """The ``Name`` and ``Version`` headers of the distribution's metadata."""
    text = _read(os.path.join(path, "METADATA")) or _read(os.path.join(path, "PKG-INFO"))
    lines = (text or "").splitlines()
    headers: dict[str, str] = {}
    for index, line in enumerate(lines):
        if not line or len(headers) == 2:  # the headers end at the first empty line
            break
        if line[0] in " \t":  # the rest of a folded header
            continue
        key, sep, value = line.partition(":")
        if not sep or not key or any(c.isspace() for c in key):
            raise _Unread  # not a header: the email parser ends the headers there
        folded = index + 1 < len(lines) and lines[index + 1][:1] in (" ", "\t")
        if key.lower() in ("name", "version") and key.lower() not in headers:
            if folded:
                raise _Unread
            headers[key.lower()] = value.lstrip(" \t")
    if "name" not in headers or "version" not in headers:
        raise _Unread
    return _Distribution(headers["name"], headers["version"])
