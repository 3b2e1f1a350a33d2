"""The host configuration as frozen value objects (DESIGN §7)."""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import attrs
from frozendict import frozendict

from accelkit.config.converter import Rule, attrs_repr
from accelkit.config.rules import NON_EMPTY_STRING, RESOURCE_DOMAIN, SECONDS
from accelkit.errors import ConfigError
from accelkit.reprs import attrs_eq, attrs_hash
from accelkit.selection import PluginSelection
from accelkit.types import AgentId

DEFAULT_AGENT = AgentId("agent-1")
STATE_DIR_ENV = "ACCELKIT_STATE_DIR"
#: the key errors about the state directory and the files in it name
STATE_DIR_KEY = "resource.state-dir"


class AllocationMode(enum.StrEnum):
    """How the node's devices are split among agents."""

    SHARED = "shared"
    AUTO_SPLIT = "auto-split"
    MANUAL = "manual"


class AffinityPolicyName(enum.StrEnum):
    """The NUMA affinity policy as the config spells it."""

    PREFER_SINGLE_NODE = "prefer-single-node"
    INTERLEAVED = "interleaved"


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``/var/lib/accelkit`` as root, else ``$XDG_STATE_HOME/accelkit``.

    ``ACCELKIT_STATE_DIR`` overrides both (useful for tests and unprivileged services).

    Raises:
        ConfigError: ``ACCELKIT_STATE_DIR`` is set but empty (it would have meant the default),
            or is a relative path.
    """
    env = os.environ if environ is None else environ
    if STATE_DIR_ENV in env:
        explicit = env[STATE_DIR_ENV]
        if not explicit.strip():
            msg = f"{STATE_DIR_ENV} is set but empty: name a directory, or unset it for the default"
            raise ConfigError(msg, key=STATE_DIR_ENV)
        if not Path(explicit).is_absolute():  # each process would find its own ledger
            msg = (
                f"{STATE_DIR_ENV}={explicit!r} is a relative path: give an absolute one (a "
                "relative path names another directory from every working directory)"
            )
            raise ConfigError(msg, key=STATE_DIR_ENV)
        return Path(explicit)
    if os.geteuid() == 0:
        return Path("/var/lib/accelkit")
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "accelkit"


@attrs.frozen(repr=False)
class ResourceConfig:
    """The ``[resource]`` section."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    allocation_mode: AllocationMode = AllocationMode.SHARED
    #: a count of the lowest-numbered cores, or explicit core ids
    reserved_cpu: int | tuple[str, ...] = 1
    reserved_mem: int = 1024**3
    memory_align_size: int = 16 * 1024**2
    affinity_policy: AffinityPolicyName = AffinityPolicyName.PREFER_SINGLE_NODE
    state_dir: Path = attrs.field(factory=default_state_dir)
    #: AUTO_SPLIT keeps each agent's devices on as few NUMA nodes as it can (DESIGN §6)
    numa_aware_split: bool = False
    #: every workload's ``pids.max`` unless its agent or its run says otherwise (None: no limit)
    pids: int | None = None


@attrs.frozen(repr=False)
class HealthConfig:
    """``[health]`` (DESIGN §15): seconds between two rediscoveries of ``serve``."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    rediscover_interval: Annotated[Decimal, SECONDS] = Decimal(60)


@attrs.frozen(repr=False)
class K8sBridgeConfig:
    """``[bridge.k8s]`` (DESIGN §16): extended resources are named ``<domain>/<slot>``."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    domain: Annotated[str, RESOURCE_DOMAIN] = "accelkit.io"
    #: the kubelet's device-plugins directory (``kubelet.sock`` and the plugins' sockets)
    kubelet_dir: Path = Path("/var/lib/kubelet/device-plugins")
    #: the kubelet's PodResources API, asked which pods still hold booked devices
    pod_resources_socket: Path = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    #: seconds between two checks for bookings the kubelet no longer lists (and re-registration)
    release_interval: Annotated[Decimal, SECONDS] = Decimal(5)
    #: seconds after ``Allocate`` during which a booking is kept though no pod lists it yet
    admission_grace: Annotated[Decimal, SECONDS] = Decimal(30)
    #: seconds after the kubelet's (re)start before a pod it does not list counts as gone (it
    #: answers for a moment without pods that still run)
    kubelet_settle: Annotated[Decimal, SECONDS] = Decimal(10)


def _default_gres_names() -> Mapping[str, str]:
    return frozendict({"cuda": "gpu"})


def _frozen_names(value: Mapping[str, str]) -> Mapping[str, str]:
    return frozendict(value)


#: a Slurm GRES name (what gres.conf, slurm.conf's Gres= and --gres read as one word)
GRES_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def _gres_name(value: Any) -> str:
    """A Slurm GRES name: it goes into gres.conf, slurm.conf and --gres as it is."""
    if not isinstance(value, str):
        msg = f"expected a string, got {value!r}"
        raise ValueError(msg)
    if not GRES_NAME.fullmatch(value):
        msg = (
            f"{value!r} is not a Slurm GRES name: a letter, then letters, digits and '_' "
            "(at most 64)"
        )
        raise ValueError(msg)
    return value


@attrs.frozen(repr=False)
class SlurmBridgeConfig:
    """``[bridge.slurm]`` (DESIGN §16): GRES names and the Slurm commands the bridge runs."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    #: the GRES name of a plugin's devices, by plugin key (others: the plugin key itself)
    gres_names: Mapping[str, Annotated[str, Rule(_gres_name)]] = attrs.field(
        factory=_default_gres_names, converter=_frozen_names
    )
    #: the ``scontrol`` that tells a job's GRES indices and whether it still runs
    scontrol: Annotated[str, NON_EMPTY_STRING] = "scontrol"
    #: ``accelkit serve`` lifts the drains accelkit's prolog set once their devices recovered
    resume: bool = False
    #: ``accelkit serve`` answers the prolog script on ``<state-dir>/slurm/prolog.sock``
    serve_prologs: bool = False


@attrs.frozen(repr=False)
class BridgeConfig:
    """``[bridge]``: one table per scheduler bridge, ``None`` when absent."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    k8s: K8sBridgeConfig | None = None
    slurm: SlurmBridgeConfig | None = None


def _frozen_devices(value: Mapping[str, tuple[str, ...]]) -> Mapping[str, tuple[str, ...]]:
    return frozendict(value)


@attrs.frozen(repr=False)
class AgentResources:
    """``[agents.resource]`` of one agent (MANUAL mode only; its ``pids`` is the agent's)."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    cpu: tuple[str, ...] | None = None
    mem: int | None = None
    devices: Mapping[str, tuple[str, ...]] = attrs.field(
        factory=frozendict, converter=_frozen_devices
    )


@attrs.frozen(repr=False)
class AgentConfig:
    """One ``[[agents]]`` entry."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    id: AgentId
    resource: AgentResources | None = None
    #: ``[agents.resource] pids``: the ``pids.max`` of the agent's workloads (None: the node's)
    pids: int | None = None


@attrs.frozen(repr=False)
class HostConfig:
    """A whole host configuration; ``source`` is the file it came from, if any."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    resource: ResourceConfig = attrs.field(factory=ResourceConfig)
    plugins: PluginSelection = attrs.field(factory=PluginSelection)
    agents: tuple[AgentConfig, ...] = (AgentConfig(DEFAULT_AGENT),)
    source: Path | None = None
    health: HealthConfig = attrs.field(factory=HealthConfig)
    bridge: BridgeConfig = attrs.field(factory=BridgeConfig)

    @property
    def agent_ids(self) -> tuple[AgentId, ...]:
        return tuple(a.id for a in self.agents)

    def pids_of(self, agent_id: str) -> int | None:
        """The ``pids.max`` of ``agent_id``'s workloads: the agent's, else the node's."""
        for agent in self.agents:
            if agent.id == agent_id and agent.pids is not None:
                return agent.pids
        return self.resource.pids

    @property
    def source_name(self) -> str:
        return str(self.source) if self.source else "<defaults>"

    def with_agent_count(self, count: int) -> HostConfig:
        """Agents ``agent-1 … agent-N`` (the ``--agents N`` option)."""
        agents = tuple(AgentConfig(AgentId(f"agent-{i}")) for i in range(1, count + 1))
        return attrs.evolve(self, agents=agents)

    def with_mode(self, mode: AllocationMode) -> HostConfig:
        """The same config in another allocation mode (the ``--mode`` option)."""
        return attrs.evolve(self, resource=attrs.evolve(self.resource, allocation_mode=mode))
