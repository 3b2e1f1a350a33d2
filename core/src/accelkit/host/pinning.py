"""A recorded AUTO_SPLIT assignment: which agent has which devices, the same in every process.

AUTO_SPLIT is computed afresh by each process from the devices it finds. Once devices come and
go while workloads hold others, a fresh split could hand a held device to another agent, so
the assignment is pinned in ``<state-dir>/assignments.json`` (by a rediscovery that finds a new
device, and by ``accelkit repartition``)::

    {"format": "accelkit-assignments/1", "agents": ["agent-1", "agent-2"],
     "devices": {"cuda": {"agent-1": ["cuda0"], "agent-2": ["cuda1"]}}}

Every process in AUTO_SPLIT with the same agents then gives each agent its pinned devices
that exist, and leaves the devices pinned to nobody unassigned. Plugins the file does not name
are split as usual. The file is written by the node (:mod:`accelkit.node.assignments`); here it
is only read: opened without following symlinks, a regular file of ours under 1 MiB.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from accelkit.config import STATE_DIR_KEY
from accelkit.errors import ConfigError
from accelkit.partition import (
    DevicePartition,
    GlobalDeviceInfo,
    Partition,
    PartitionResult,
    natural_sort_key,
)
from accelkit.partition.scaling import partition_capacity, scaling_factors
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import AgentId, DeviceId, DeviceName

__all__ = ["ASSIGNMENTS_FILE", "FORMAT", "PinnedAssignment", "apply_pinned", "read_pinned"]

ASSIGNMENTS_FILE = "assignments.json"
FORMAT = "accelkit-assignments/1"
_LIMIT = 1 << 20

Pins = Mapping[DeviceName, Mapping[AgentId, tuple[DeviceId, ...]]]


def _agents(value: Iterable[str]) -> tuple[AgentId, ...]:
    return tuple(AgentId(a) for a in value)


def _pins(value: Mapping[Any, Mapping[Any, Any]]) -> Pins:
    return {
        DeviceName(k): {
            AgentId(a): tuple(sorted((DeviceId(d) for d in ids), key=natural_sort_key))
            for a, ids in v.items()
        }
        for k, v in value.items()
    }


@attrs.frozen(repr=False)
class PinnedAssignment:
    """Per plugin, each agent's devices; recorded for exactly these ``agents``."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    agents: tuple[AgentId, ...] = attrs.field(converter=_agents)
    devices: Pins = attrs.field(converter=_pins)

    def to_json(self) -> dict[str, Any]:
        """The file's content."""
        return {
            "format": FORMAT,
            "agents": list(self.agents),
            "devices": {k: {a: list(ids) for a, ids in v.items()} for k, v in self.devices.items()},
        }

    def evolve(
        self, key: DeviceName, masks: Mapping[AgentId, tuple[DeviceId, ...]]
    ) -> PinnedAssignment:
        """The same with plugin ``key`` pinned to ``masks``."""
        return PinnedAssignment(self.agents, {**self.devices, key: masks})


def _error(path: Path, what: str, source: str | None) -> ConfigError:
    return ConfigError(f"assignments {str(path)!r}: {what}", file=source, key=STATE_DIR_KEY)


def read_pinned(state_dir: Path | str, *, source: str | None = None) -> PinnedAssignment | None:
    """The pinned assignment of ``state_dir``, ``None`` when there is none.

    Raises ``ConfigError`` for a file that is not a regular file of ours, too large, or not an
    assignment file (remove it to split afresh).
    """
    path = Path(state_dir) / ASSIGNMENTS_FILE
    try:
        # O_NONBLOCK: a FIFO put in its place is refused below instead of hanging the open
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except NotADirectoryError as exc:  # what the state directory should be is something else
        msg = f"the state directory {str(path.parent)!r} is not a directory"
        raise ConfigError(msg, file=source, key=STATE_DIR_KEY) from exc
    except OSError as exc:
        raise _error(path, f"cannot read it: {exc.strerror or exc}", source) from exc
    try:
        # the type is checked on the descriptor before any read (a directory cannot be read)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise _error(path, "not a regular file of the user running accelkit", source)
        if info.st_size > _LIMIT:
            raise _error(path, "larger than 1 MiB", source)
        with os.fdopen(fd, "rb", closefd=False) as file:
            raw = file.read(_LIMIT + 1)
    except OSError as exc:
        raise _error(path, f"cannot read it: {exc.strerror or exc}", source) from exc
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            msg = f"expected format {FORMAT!r}"
            raise ValueError(msg)
        agents, devices = data["agents"], data["devices"]
        if not isinstance(agents, list) or not all(isinstance(a, str) for a in agents):
            msg = "'agents' must be a list of agent ids"
            raise ValueError(msg)
        if not isinstance(devices, dict) or not all(
            isinstance(per, dict)
            and all(
                isinstance(ids, list) and all(isinstance(d, str) for d in ids)
                for ids in per.values()
            )
            for per in devices.values()
        ):
            msg = "'devices' must map each plugin to agents' lists of device ids"
            raise ValueError(msg)
    except (ValueError, KeyError) as exc:
        msg = f"cannot parse it ({exc}); remove it to split the devices afresh"
        raise _error(path, msg, source) from exc
    return PinnedAssignment(agents, devices)


def apply_pinned(
    result: PartitionResult,
    pinned: PinnedAssignment,
    device_map: Mapping[DeviceName, GlobalDeviceInfo],
) -> tuple[PartitionResult, list[str]]:
    """``result`` with the pinned plugins' devices as recorded; the warnings to show.

    A pin recorded for other agents is not applied (a warning says so). A pinned device that
    no longer exists is left out; a device pinned to nobody is unassigned. Devices the fresh
    split reserved (cpu cores) stay reserved.
    """
    if tuple(result.assignments) != pinned.agents:
        return result, [
            f"the recorded assignment ({ASSIGNMENTS_FILE}) is for agents "
            f"{list(pinned.agents)}, not {list(result.assignments)}: not applied"
        ]
    assignments = {a: dict(parts) for a, parts in result.assignments.items()}
    unassigned = dict(result.unassigned)
    warnings: list[str] = []
    for key, masks in pinned.devices.items():
        info = device_map.get(key)
        if info is None or info.shared_by_amount:
            continue
        free = {d for parts in result.assignments.values() for d in _ids(parts.get(key))}
        given: set[DeviceId] = set()
        for agent, parts in assignments.items():
            mine = tuple(d for d in masks.get(agent, ()) if d in free and d not in given)
            given.update(mine)
            parts[key] = DevicePartition(mine)
        left = tuple(sorted(free - given, key=natural_sort_key))
        unassigned[key] = left
        if left:
            warnings.append(
                f"{key} device(s) {', '.join(left)} not assigned to any agent: "
                "'accelkit repartition' gives them to agents"
            )
    capacity = {
        a: {
            slot: amount
            for key, part in parts.items()
            for slot, amount in partition_capacity(device_map[key], part).items()
        }
        for a, parts in assignments.items()
    }
    scaling = {a: scaling_factors(capacity[a], result.allocatable) for a in assignments}
    return (
        attrs.evolve(
            result,
            assignments=assignments,
            capacity=capacity,
            scaling=scaling,
            unassigned=unassigned,
        ),
        warnings,
    )


def _ids(part: Partition | None) -> tuple[DeviceId, ...]:
    return () if part is None else part.device_ids
