"""The partition host: plugins loaded once per node, devices split among agents (DESIGN §8)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from accelkit.allocmap import AbstractAllocMap, AffinityPolicy
from accelkit.calls import call_sync
from accelkit.config.model import AllocationMode, HostConfig
from accelkit.discovery import PluginLoader
from accelkit.errors import PluginContractError
from accelkit.host.agent import AgentView
from accelkit.host.plan import build_plan
from accelkit.partition.model import GlobalDeviceInfo
from accelkit.partition.partitioner import PartitionResult, ResourcePartitioner
from accelkit.plugin import (
    AbstractAgentContext,
    AbstractComputePlugin,
    MaskedAgentContext,
    PluginRole,
)
from accelkit.registry import PluginStatus
from accelkit.types import AgentId, DeviceName

log = logging.getLogger(__name__)


class PartitionHost:
    """Loads the plugins, discovers the devices and gives every agent its masked contexts.

    Use it as ``async with PartitionHost.open(config) as host:``; leaving the block (or a
    start-up that fails halfway) closes every context and cleans every started plugin up.
    The host knows nothing of workloads or the allocation ledger: :class:`accelkit.node.Node`
    composes a host with the ledger's bookkeeper.
    """

    def __init__(self, config: HostConfig, loader: PluginLoader | None = None) -> None:
        self.config = config
        self._loader = loader
        self.plugins: dict[DeviceName, AbstractComputePlugin] = {}
        self.device_map: dict[DeviceName, GlobalDeviceInfo] = {}
        self.agents: dict[AgentId, AgentView] = {}
        self._result: PartitionResult | None = None
        self._contexts: list[AbstractAgentContext] = []
        self._warnings: list[str] = []

    @classmethod
    def open(
        cls,
        config: HostConfig | None = None,
        *,
        loader: PluginLoader | None = None,
    ) -> PartitionHost:
        """A host for ``config`` (default: the installed plugins, defaults, one agent).

        ``loader`` replaces entry-point discovery, e.g. with plugins registered by a test.
        The host never touches the allocation ledger (read-only tools such as ``accelkit plan``
        use it as it is; :class:`accelkit.node.Node` adds the ledger). Nothing happens until the
        host is entered or :meth:`start` is awaited.
        """
        return cls(config or HostConfig(), loader)

    async def __aenter__(self) -> PartitionHost:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def loader(self) -> PluginLoader:
        """The plugin loader (built from the installed entry points on start)."""
        if self._loader is None:
            self._loader = PluginLoader.from_entry_points(self.config.plugins.with_environment())
        return self._loader

    @property
    def result(self) -> PartitionResult:
        """The partition computed on start."""
        if self._result is None:
            msg = "the partition host is not started"
            raise RuntimeError(msg)
        return self._result

    async def start(self) -> None:
        """Load and start the plugins, partition the devices, create the agents' contexts.

        Raises:
            ConfigError: the configuration does not fit the discovered devices (all problems).
            PluginLoadError: in strict mode, when a plugin failed.
        """
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise

    async def _start(self) -> None:
        for plugin in await self.loader.start():
            self.plugins[plugin.key] = plugin
            self.device_map[plugin.key] = device_info(plugin)
        for record in self.loader.records.values():
            if record.status is PluginStatus.FAILED:
                self._warnings.append(f"plugin {record.name!r} failed: {record.error}")
        partitioner = ResourcePartitioner(
            self.device_map, self.config.resource, source=self.config.source_name
        )
        self._result = result = self._pinned(partitioner.partition(self.config.agents))
        policy = AffinityPolicy(self.config.resource.affinity_policy.value)
        shared: dict[DeviceName, AbstractAllocMap] = {}
        for agent_id, parts in result.assignments.items():
            contexts: dict[DeviceName, AbstractAgentContext] = {}
            for key, partition in parts.items():
                create = functools.partial(
                    self.plugins[key].create_agent_context, agent_id, partition
                )
                limit = self.config.plugins.call_timeout  # a hang fails start-up, named
                ctx = await call_sync(key, "create_agent_context", limit, create)
                self._contexts.append(ctx)
                if result.mode is AllocationMode.SHARED:
                    _share(ctx, shared)
                contexts[key] = ctx
            self.agents[agent_id] = AgentView(
                agent_id, contexts, scaling=result.scaling[agent_id], affinity_policy=policy
            )

    def _pinned(self, result: PartitionResult) -> PartitionResult:
        """AUTO_SPLIT: the assignment recorded in the state dir, if any (see :mod:`.pinning`)."""
        if result.mode is not AllocationMode.AUTO_SPLIT:
            return result
        from accelkit.host.pinning import apply_pinned, read_pinned  # only auto-split pins

        pinned = read_pinned(self.config.resource.state_dir, source=self.config.source_name)
        if pinned is None:
            return result
        result, warnings = apply_pinned(result, pinned, self.device_map)
        self._warnings.extend(warnings)
        return result

    async def close(self) -> None:
        """Close every context, then clean the plugins up; errors are logged, not raised."""
        while self._contexts:
            ctx = self._contexts.pop()
            try:
                await ctx.close()
            except Exception:
                log.warning("closing %r failed", ctx, exc_info=True)
        if self._loader is not None:
            await self._loader.close()

    def replace_contexts(
        self,
        key: DeviceName,
        contexts: Mapping[AgentId, AbstractAgentContext],
        info: GlobalDeviceInfo,
    ) -> list[AbstractAgentContext]:
        """Swap plugin ``key``'s context of each agent named for a new one; the old ones.

        Masks never change in place: a rediscovery builds new contexts and swaps them here,
        in one step of the event loop (the caller moves the allocations first). Each agent
        gets a new view; ``device_map[key]`` becomes ``info``. The caller closes the old
        contexts.
        """
        old: list[AbstractAgentContext] = []
        for agent_id, ctx in contexts.items():
            view = self.agents[agent_id]
            old.append(view.contexts[key])
            self.agents[agent_id] = AgentView(
                agent_id,
                {**view.contexts, key: ctx},
                scaling=view.scaling_factors(),
                affinity_policy=view.affinity_policy,
            )
            self._contexts.append(ctx)
        self._contexts[:] = [c for c in self._contexts if all(c is not o for o in old)]
        self.device_map[key] = info
        return old

    @property
    def warnings(self) -> list[str]:
        """Everything the operator should know about the plan."""
        return [*self.result.warnings, *self._warnings]

    def add_warning(self, line: str) -> None:
        """Add a line for the operator (the node adds what reconciling the ledger found)."""
        self._warnings.append(line)

    @property
    def roles(self) -> dict[DeviceName, PluginRole]:
        """Each started plugin's role, by key."""
        return {key: plugin.role for key, plugin in self.plugins.items()}

    def plan(self) -> dict[str, Any]:
        """The serialisable plan, in the shape ``accelkit plan --json`` prints."""
        return build_plan(self.result, self._warnings)


def device_info(plugin: AbstractComputePlugin) -> GlobalDeviceInfo:
    """What partitioning needs of a started plugin's devices."""
    devices = plugin.devices
    return GlobalDeviceInfo(
        plugin.key,
        devices,
        plugin.device_slots(devices),
        shared_by_amount=plugin.shared_by_amount,
        role=plugin.role,
    )


def _share(ctx: AbstractAgentContext, shared: dict[DeviceName, AbstractAllocMap]) -> None:
    """SHARED mode: one alloc map per plugin, made by the first agent, used by all."""
    key = ctx.plugin.key
    if key not in shared:
        shared[key] = ctx.alloc_map
        return
    if not isinstance(ctx, MaskedAgentContext):
        msg = (
            f"plugin {key!r}: {type(ctx).__name__} cannot share an alloc map, which "
            "allocation-mode 'shared' needs (derive it from MaskedAgentContext)"
        )
        raise PluginContractError(msg)
    ctx.share_alloc_map(shared[key])
