"""What a local process tree gets from a merged config: environment, CPU affinity, memory limit.

Mounts cannot be applied to a plain process (there is no mount namespace); a device node is
already at its path on the host, so only bind mounts whose source differs from the target are
listed in :attr:`ProcessPlan.notes` as not applied. Extra gids, networks, syscalls and CDI names
are container matters and are noted the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import MountType, WorkloadConfig


def _str_map(value: Mapping[str, str]) -> dict[str, str]:
    return dict(value)


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value)


def _optional_ints(value: Any) -> tuple[int, ...] | None:
    return None if value is None else tuple(int(v) for v in value)


@attrs.frozen(repr=False)
class ProcessPlan:
    """How to start one process tree; JSON-serialisable for the launcher."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    env: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map)
    cpu_affinity: tuple[int, ...] | None = attrs.field(default=None, converter=_optional_ints)
    memory_limit: int | None = None
    notes: tuple[str, ...] = attrs.field(default=(), converter=_strings)

    def to_json(self) -> dict[str, Any]:
        """A plain JSON object (no floats)."""
        return {
            "env": dict(self.env),
            "cpu_affinity": None if self.cpu_affinity is None else list(self.cpu_affinity),
            "memory_limit": self.memory_limit,
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessPlan:
        """The inverse of :meth:`to_json`."""
        limit = data.get("memory_limit")
        return cls(
            env={str(k): str(v) for k, v in dict(data.get("env") or {}).items()},
            cpu_affinity=data.get("cpu_affinity"),
            memory_limit=None if limit is None else int(limit),
            notes=data.get("notes") or (),
        )


def _notes(config: WorkloadConfig) -> list[str]:
    notes = [
        f"mount {m.source} -> {m.target} not applied to a process tree"
        for m in config.mounts
        if m.type is MountType.BIND and m.source != m.target
    ]
    if config.extra_gids:
        notes.append(f"extra gids {list(config.extra_gids)} not applied to a process tree")
    if config.networks:
        notes.append(f"networks {list(config.networks)} not applied to a process tree")
    if config.extra_syscalls:
        notes.append(f"syscalls {list(config.extra_syscalls)} not applied to a process tree")
    if config.cdi_devices:
        notes.append(f"CDI devices {list(config.cdi_devices)} need a container runtime")
    return notes


def render_process(config: WorkloadConfig, base_env: Mapping[str, str]) -> ProcessPlan:
    """The plan for a process tree: ``base_env`` overlaid with the config's variables."""
    env = {**base_env, **config.env_vars}
    return ProcessPlan(
        env=env,
        cpu_affinity=config.cpuset_cpus,
        memory_limit=config.memory_limit,
        notes=_notes(config),
    )
