"""Merging the configs that several plugins' hooks returned for one workload.

Rules (DESIGN §9): the same environment variable, resource-data key or mount target with
different values from two plugins is a :class:`~accelkit.errors.HookConflict` naming both plugins
and the key; equal values are kept once. Lists (networks, gids, syscalls, CDI names, cpusets) are
unioned in first-seen order, cpusets sorted. ``memory_limit`` is a single value: two different
limits conflict.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import attrs

from accelkit.errors import HookConflict
from accelkit.types import Mount, WorkloadConfig

T = TypeVar("T")


def _union(lists: Iterable[Iterable[T]]) -> tuple[T, ...]:
    return tuple(dict.fromkeys(item for items in lists for item in items))


class _Owned:
    """Values by key, remembering which plugin set each one first."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.values: dict[str, object] = {}
        self.owners: dict[str, str] = {}

    def put(self, plugin: str, key: str, value: object) -> None:
        if key in self.values and self.values[key] != value:
            msg = (
                f"{self.what} {key!r} is set differently by plugins {self.owners[key]!r} "
                f"({self.values[key]!r}) and {plugin!r} ({value!r})"
            )
            raise HookConflict(msg)
        self.values.setdefault(key, value)
        self.owners.setdefault(key, plugin)


def merge_configs(parts: Sequence[tuple[str, WorkloadConfig]]) -> WorkloadConfig:
    """One config from ``(plugin key, config)`` pairs, in the order given (allocation order)."""
    env = _Owned("environment variable")
    data = _Owned("resource data key")
    mounts = _Owned("mount target")
    limit = _Owned("setting")
    for plugin, config in parts:
        for name, value in config.env_vars.items():
            env.put(plugin, name, value)
        for name, value in config.resource_data.items():
            data.put(plugin, name, value)
        for mount in config.mounts:
            target = posixpath.normpath(mount.target)
            mounts.put(plugin, target, attrs.evolve(mount, target=target))
        if config.memory_limit is not None:
            limit.put(plugin, "memory_limit", config.memory_limit)
    configs = [config for _plugin, config in parts]
    cpus = [c.cpuset_cpus for c in configs if c.cpuset_cpus is not None]
    mems = [c.cpuset_mems for c in configs if c.cpuset_mems is not None]
    merged_mounts = [m for m in mounts.values.values() if isinstance(m, Mount)]
    memory_limit = limit.values.get("memory_limit")
    # keyword arguments through a dict: the attrs stubs cannot type the tuple converters
    fields: dict[str, Any] = {
        "mounts": tuple(merged_mounts),
        "env_vars": {k: str(v) for k, v in env.values.items()},
        "resource_data": {k: str(v) for k, v in data.values.items()},
        "networks": _union(c.networks for c in configs),
        "extra_gids": _union(c.extra_gids for c in configs),
        "extra_syscalls": _union(c.extra_syscalls for c in configs),
        "cdi_devices": _union(c.cdi_devices for c in configs),
        "cpuset_cpus": tuple(sorted(set(_union(cpus)))) if cpus else None,
        "cpuset_mems": tuple(sorted(set(_union(mems)))) if mems else None,
        "memory_limit": memory_limit if isinstance(memory_limit, int) else None,
    }
    return WorkloadConfig(**fields)
