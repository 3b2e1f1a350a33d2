"""The host configuration file as a declarative schema (DESIGN §7).

Each class is one TOML table, each field one key (``memory_align_size`` is
``memory-align-size``); :func:`accelkit.config.converter.structure` reads a parsed file into
:class:`HostFile`, refusing unknown keys and reporting every problem at once. The plugin
sections under ``[plugins.config.NAME]`` are kept as tables here and read by each plugin's own
schema (:mod:`accelkit.config.plugin_sections`).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any

import attrs

from accelkit.config.converter import MISSING, KeyPath, Rule, ValueProblems, attrs_repr
from accelkit.config.model import (
    AffinityPolicyName,
    AllocationMode,
    BridgeConfig,
    HealthConfig,
)
from accelkit.config.rules import (
    AGENT_ID,
    BYTE_SIZE,
    NAMES,
    PIDS,
    POSITIVE_BYTE_SIZE,
    SECONDS,
    choice,
)
from accelkit.reprs import attrs_eq, attrs_hash

__all__ = [
    "AgentEntry",
    "AgentIdentity",
    "AgentResourceSection",
    "HostFile",
    "PluginsSection",
    "ResourceSection",
]


def _reserved_cpu(value: Any) -> int | tuple[str, ...]:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        if twice := sorted({v for v in value if value.count(v) > 1}):
            msg = f"core id(s) {', '.join(map(repr, twice))} listed twice"
            raise ValueError(msg)
        return tuple(value)
    msg = f'expected a non-negative count or a list of core ids like ["0"], got {value!r}'
    raise ValueError(msg)


def _state_dir(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():  # " " would be a directory named so
        msg = f"expected a directory path, got {value!r}"
        raise ValueError(msg)
    return value


def _core_ids(value: Any) -> tuple[str, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        msg = (
            f"Old integer format detected for 'cpu' ({value}); list the core ids instead, "
            'for example cpu = ["0", "1", "2", "3"]'
        )
        raise ValueError(msg)
    if not isinstance(value, list) or not all(
        isinstance(v, str | int) and not isinstance(v, bool) for v in value
    ):
        msg = f"expected a list of core ids, got {value!r}"
        raise ValueError(msg)
    if not value:
        msg = "an agent needs at least one cpu core"
        raise ValueError(msg)
    return tuple(str(v) for v in value)


def _device_ids(value: Any) -> Mapping[str, tuple[str, ...]]:
    """``devices = { cuda = ["cuda0"] }``: device ids per device name."""
    if not isinstance(value, Mapping):
        msg = 'expected a table such as { cuda = ["cuda0"] }'
        raise ValueError(msg)
    problems: list[tuple[KeyPath, str]] = []
    devices: dict[str, tuple[str, ...]] = {}
    for name, ids in value.items():
        if name in ("cpu", "mem"):  # keys of [agents.resource] itself, not device names
            problems.append(
                ((name,), f"give {name!r} as its own key under [agents.resource], not in devices")
            )
        elif (
            "." in name
            or not isinstance(ids, list)
            or any(isinstance(i, int | float) and not isinstance(i, bool) for i in ids)
        ):
            device_name = name.split(".", 1)[0]
            problems.append(
                (
                    (name,),
                    "Old slot-based format detected; give device ids per device name instead, "
                    f'for example devices = {{ {device_name} = ["{device_name}0", '
                    f'"{device_name}1"] }}',
                )
            )
        elif not all(isinstance(i, str) and i for i in ids):
            problems.append(((name,), f"expected a list of device ids, got {ids!r}"))
        else:
            devices[name] = tuple(ids)
    if problems:
        raise ValueProblems(problems)
    return devices


_NEEDS_ID = "every agent needs a non-empty string id"


@attrs.frozen(repr=False)
class ResourceSection:
    """``[resource]``."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    allocation_mode: Annotated[AllocationMode, choice(AllocationMode, "mode")] = (
        AllocationMode.SHARED
    )
    reserved_cpu: Annotated[int | tuple[str, ...], Rule(_reserved_cpu)] = 1
    reserved_mem: Annotated[int, BYTE_SIZE] = 1024**3
    memory_align_size: Annotated[int, POSITIVE_BYTE_SIZE] = 16 * 1024**2
    affinity_policy: Annotated[AffinityPolicyName, choice(AffinityPolicyName, "policy")] = (
        AffinityPolicyName.PREFER_SINGLE_NODE
    )
    #: relative to the config file; ``None`` for the default (see ``default_state_dir``)
    state_dir: Annotated[str | None, Rule(_state_dir)] = None
    numa_aware_split: bool = False
    #: every workload's ``pids.max`` unless its agent or its run says otherwise
    pids: Annotated[int | None, PIDS] = None


@attrs.frozen(repr=False)
class PluginsSection:
    """``[plugins]``; ``config`` holds one table per entry-point name, read by its plugin."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    allowed: Annotated[tuple[str, ...] | None, NAMES] = None
    blocked: Annotated[tuple[str, ...], NAMES] = ()
    strict: bool = False
    config: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    call_timeout: Annotated[Decimal, SECONDS] = Decimal(30)
    hook_timeout: Annotated[Decimal, SECONDS] = Decimal(60)


@attrs.frozen(repr=False)
class AgentIdentity:
    """``[agents.agent]``."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    id: Annotated[str, AGENT_ID] = attrs.field(metadata={MISSING: _NEEDS_ID})


@attrs.frozen(repr=False)
class AgentResourceSection:
    """``[agents.resource]`` (``cpu``, ``mem`` and ``devices`` in MANUAL mode only)."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    cpu: Annotated[tuple[str, ...] | None, Rule(_core_ids)] = None
    mem: Annotated[int | None, BYTE_SIZE] = None
    devices: Annotated[Mapping[str, tuple[str, ...]], Rule(_device_ids)] = attrs.field(factory=dict)
    #: the ``pids.max`` of this agent's workloads (any mode)
    pids: Annotated[int | None, PIDS] = None


@attrs.frozen(repr=False)
class AgentEntry:
    """One ``[[agents]]`` entry."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    agent: AgentIdentity = attrs.field(
        metadata={MISSING: "every agent needs a non-empty string id"}
    )
    resource: AgentResourceSection | None = None


@attrs.frozen(repr=False)
class HostFile:
    """A whole host configuration file."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    resource: ResourceSection = attrs.field(factory=ResourceSection)
    plugins: PluginsSection = attrs.field(factory=PluginsSection)
    agents: tuple[AgentEntry, ...] = ()
    health: HealthConfig = attrs.field(factory=HealthConfig)
    bridge: BridgeConfig = attrs.field(factory=BridgeConfig)
