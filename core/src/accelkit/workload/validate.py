"""The one rule set for a :class:`~accelkit.types.WorkloadConfig` a lifecycle hook returns.

The runtime applies it to every hook's config before anything is merged or rendered
(:func:`validate_config`), and the conformance kit applies the same rules to a vendor's hooks
(:func:`config_problems`, re-exported by :mod:`accelkit.testing`), so a config the kit accepts is
one the runtime accepts. A hook's config ends up in environment blocks, env files,
``resource.txt`` lines, Docker bodies and CDI specs, so the rules are:

- environment variable names are POSIX names: letters, digits and ``_``, not starting with a
  digit (``A-B`` is refused: a shell cannot export it); values are strings without NUL, CR or
  newline;
- resource data names are non-empty, without ``=``, NUL, CR or newline; values as for env;
- mounts are :class:`~accelkit.types.Mount` objects with absolute source and target paths,
  without NUL or newline, and no two mounts share a target (after normalising ``/t/`` to ``/t``);
- ``extra_gids``, ``cpuset_cpus`` and ``cpuset_mems`` hold non-negative integers, and a cpuset,
  when given, is not empty (``None`` means any);
- CDI names are fully qualified (``vendor.com/class=device``);
- ``networks`` and ``extra_syscalls`` hold non-empty entries without NUL or newline;
- ``memory_limit``, when given, is a positive number of bytes.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Iterator, Mapping

from accelkit.errors import WorkloadError
from accelkit.types import Mount, WorkloadConfig

__all__ = ["CDI_DEVICE", "CDI_KIND", "ENV_NAME", "config_problems", "validate_config"]

#: a CDI kind, ``vendor.com/class``; a fully qualified device name is ``<kind>=<device>``
CDI_KIND = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?/[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
)
#: a CDI device name inside a kind
CDI_DEVICE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
#: a POSIX environment variable name (IEEE Std 1003.1, 8.1)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FORBIDDEN = ("\0", "\n", "\r")


def _bad_text(text: str) -> bool:
    return any(c in text for c in _FORBIDDEN)


def _value_problem(field: str, name: str, value: object) -> str | None:
    if not isinstance(value, str):
        return f"{field} {name!r} must be a string, not {type(value).__name__}"
    if _bad_text(value):
        return f"{field} {name!r} has a value with NUL or newline"
    return None


def _env_problems(config: WorkloadConfig) -> Iterator[str]:
    for name, value in config.env_vars.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            yield (
                f"environment variable name {name!r} is not a valid name (letters, digits and "
                "'_', not starting with a digit)"
            )
        if (problem := _value_problem("environment variable", name, value)) is not None:
            yield problem
    for name, value in config.resource_data.items():
        if not isinstance(name, str) or not name or "=" in name or _bad_text(name):
            yield f"resource data {name!r} must have a non-empty name without '=', NUL or newline"
        if (problem := _value_problem("resource data", name, value)) is not None:
            yield problem


def _mount_problems(mounts: Iterable[object]) -> Iterator[str]:
    seen: set[str] = set()
    for mount in mounts:
        if not isinstance(mount, Mount):
            yield f"mounts must be Mount objects, got {type(mount).__name__}"
            continue
        if not mount.source or _bad_text(mount.source):
            yield f"mount {mount.target!r} has an empty or malformed source"
        elif not posixpath.isabs(mount.source):
            yield f"mount source {mount.source!r} is not an absolute path"
        if _bad_text(mount.target):
            yield f"mount target {mount.target!r} holds NUL or newline"
        elif not posixpath.isabs(mount.target):
            yield f"mount target {mount.target!r} is not an absolute path"
        else:
            target = posixpath.normpath(mount.target)
            if target in seen:
                yield f"mount target {target!r} appears twice"
            seen.add(target)


def _id_problems(field: str, values: Iterable[object] | None) -> Iterator[str]:
    for value in values or ():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            yield f"{field} must hold non-negative integers, got {value!r}"


def _number_problems(config: WorkloadConfig) -> Iterator[str]:
    yield from _id_problems("extra_gids", config.extra_gids)
    for field, cpuset in (("cpuset_cpus", config.cpuset_cpus), ("cpuset_mems", config.cpuset_mems)):
        if cpuset is not None and not cpuset:
            yield f"{field} is empty (None means any; a process needs at least one)"
        yield from _id_problems(field, cpuset)
    limit = config.memory_limit
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
        yield f"memory_limit must be a positive number of bytes, got {limit!r}"


def _name_problems(config: WorkloadConfig) -> Iterator[str]:
    for name in config.cdi_devices:
        kind, sep, device = name.partition("=")
        if not sep or CDI_KIND.fullmatch(kind) is None or CDI_DEVICE.fullmatch(device) is None:
            yield f"CDI device {name!r} is not a fully qualified name like 'vendor.com/class=name'"
    for field, items in (("networks", config.networks), ("extra_syscalls", config.extra_syscalls)):
        if any(not isinstance(i, str) or not i or _bad_text(i) for i in items):
            yield f"{field} holds an empty or malformed entry"


def config_problems(config: object) -> list[str]:
    """Every way ``config`` breaks the rules, as sentences; empty when it is valid."""
    if not isinstance(config, WorkloadConfig):
        return [f"pre_create() must return a WorkloadConfig, not {type(config).__name__}"]
    if not isinstance(config.env_vars, Mapping) or not isinstance(config.resource_data, Mapping):
        return ["env_vars and resource_data must be mappings of names to strings"]
    return [
        *_env_problems(config),
        *_mount_problems(config.mounts),
        *_number_problems(config),
        *_name_problems(config),
    ]


def validate_config(plugin: str, config: WorkloadConfig) -> None:
    """Raise :class:`~accelkit.errors.WorkloadError` naming the plugin and every problem."""
    if problems := config_problems(config):
        msg = f"plugin {plugin!r}: " + "; ".join(problems)
        raise WorkloadError(msg)
