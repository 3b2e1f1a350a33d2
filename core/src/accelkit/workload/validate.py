"""Checks on what one plugin's hook returned, before anything is merged or rendered.

A hook's :class:`~accelkit.types.WorkloadConfig` ends up in environment blocks, ``resource.txt``
lines, Docker bodies and CDI specs, so text that would break any of them is refused here:
names and values with NUL or newline, relative or duplicate mount targets, negative ids, an empty
CPU set.
Every problem raises :class:`~accelkit.errors.WorkloadError` naming the plugin and the field.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping

from accelkit.errors import WorkloadError
from accelkit.types import WorkloadConfig

#: a CDI kind, ``vendor.com/class``; a fully qualified device name is ``<kind>=<device>``
CDI_KIND = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?/[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
)
#: a CDI device name inside a kind
CDI_DEVICE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_FORBIDDEN = ("\0", "\n", "\r")


def _bad_text(text: str) -> bool:
    return any(c in text for c in _FORBIDDEN)


def _check_mapping(plugin: str, field: str, values: Mapping[str, str]) -> None:
    for name, value in values.items():
        if not name or "=" in name or _bad_text(name):
            msg = f"plugin {plugin!r}: {field} name {name!r} is empty or holds '=', NUL or newline"
            raise WorkloadError(msg)
        if _bad_text(value):
            msg = f"plugin {plugin!r}: {field} {name!r} has a value with NUL or newline"
            raise WorkloadError(msg)


def _check_ids(plugin: str, field: str, values: Iterable[int] | None) -> None:
    for value in values or ():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            msg = f"plugin {plugin!r}: {field} must hold non-negative integers, got {value!r}"
            raise WorkloadError(msg)


def _check_mounts(plugin: str, config: WorkloadConfig) -> None:
    seen: set[str] = set()
    for mount in config.mounts:
        if not mount.source or _bad_text(mount.source) or _bad_text(mount.target):
            msg = f"plugin {plugin!r}: mount {mount.target!r} has an empty or malformed source"
            raise WorkloadError(msg)
        if not posixpath.isabs(mount.target):
            msg = f"plugin {plugin!r}: mount target {mount.target!r} is not an absolute path"
            raise WorkloadError(msg)
        target = posixpath.normpath(mount.target)
        if target in seen:
            msg = f"plugin {plugin!r}: mount target {target!r} appears twice"
            raise WorkloadError(msg)
        seen.add(target)


def validate_config(plugin: str, config: WorkloadConfig) -> None:
    """Raise :class:`~accelkit.errors.WorkloadError` when ``config`` cannot be used as is."""
    if not isinstance(config, WorkloadConfig):
        msg = f"plugin {plugin!r}: pre_create returned {type(config).__name__}, not WorkloadConfig"
        raise WorkloadError(msg)
    _check_mapping(plugin, "environment variable", config.env_vars)
    _check_mapping(plugin, "resource data", config.resource_data)
    _check_mounts(plugin, config)
    _check_ids(plugin, "extra_gids", config.extra_gids)
    if config.cpuset_cpus is not None and not config.cpuset_cpus:
        msg = f"plugin {plugin!r}: cpuset_cpus is empty (None means any CPU; a process needs one)"
        raise WorkloadError(msg)
    _check_ids(plugin, "cpuset_cpus", config.cpuset_cpus)
    _check_ids(plugin, "cpuset_mems", config.cpuset_mems)
    for name in config.cdi_devices:
        kind, sep, device = name.partition("=")
        if not sep or CDI_KIND.fullmatch(kind) is None or CDI_DEVICE.fullmatch(device) is None:
            msg = f"plugin {plugin!r}: {name!r} is not a CDI device name (vendor.com/class=name)"
            raise WorkloadError(msg)
    for field, items in (("networks", config.networks), ("extra_syscalls", config.extra_syscalls)):
        if any(not item or _bad_text(item) for item in items):
            msg = f"plugin {plugin!r}: {field} holds an empty or malformed entry"
            raise WorkloadError(msg)
    limit = config.memory_limit
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
        msg = f"plugin {plugin!r}: memory_limit must be a positive number of bytes, got {limit!r}"
        raise WorkloadError(msg)
