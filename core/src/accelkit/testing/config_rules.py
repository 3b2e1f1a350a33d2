"""What makes a :class:`~accelkit.types.WorkloadConfig` from a lifecycle hook valid."""

from __future__ import annotations

import re
from collections.abc import Iterator

from accelkit.types import Mount, WorkloadConfig

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: a fully qualified CDI device name: ``vendor.example/class=device``
_CDI_NAME = re.compile(
    r"[a-z0-9][a-z0-9.-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*=[a-zA-Z0-9][a-zA-Z0-9_.:-]*"
)


def config_problems(config: object) -> list[str]:
    """Every way ``config`` breaks the rules, as sentences; empty when it is valid."""
    if not isinstance(config, WorkloadConfig):
        return [f"pre_create() must return a WorkloadConfig, not {type(config).__name__}"]
    return [*_env_problems(config), *_mount_problems(config), *_number_problems(config)]


def _env_problems(config: WorkloadConfig) -> Iterator[str]:
    for name, value in config.env_vars.items():
        if not _ENV_NAME.fullmatch(name):
            yield f"environment variable name {name!r} is not a valid name (letters, digits, _)"
        if not isinstance(value, str):
            yield f"environment variable {name!r} must be a string, not {type(value).__name__}"
    for key, value in config.resource_data.items():
        if not key or not isinstance(value, str):
            yield f"resource data {key!r} must have a non-empty name and a string value"
    for name in config.cdi_devices:
        if not _CDI_NAME.fullmatch(name):
            yield f"CDI device {name!r} is not a fully qualified name like 'vendor.com/class=name'"


def _mount_problems(config: WorkloadConfig) -> Iterator[str]:
    for mount in config.mounts:
        if not isinstance(mount, Mount):
            yield f"mounts must be Mount objects, got {type(mount).__name__}"
            continue
        for what, path in (("source", mount.source), ("target", mount.target)):
            if not path.startswith("/"):
                yield f"mount {what} {path!r} must be an absolute path"


def _number_problems(config: WorkloadConfig) -> Iterator[str]:
    for field, values in (
        ("cpuset_cpus", config.cpuset_cpus or ()),
        ("cpuset_mems", config.cpuset_mems or ()),
        ("extra_gids", config.extra_gids),
    ):
        for value in values:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                yield f"{field} must hold non-negative integers, got {value!r}"
    limit = config.memory_limit
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0):
        yield f"memory_limit must be a positive number of bytes, got {limit!r}"
