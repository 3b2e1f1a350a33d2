"""Live rediscovery (DESIGN §15): the plugins are asked for their devices again.

- A **new** device joins what agents may allocate where every agent shares the plugin's
  devices (SHARED mode, or one agent): each agent gets a new context over its widened mask
  (:func:`~accelkit.node.context_swap.widen_masks`). In the split modes it waits in the
  unassigned pool for ``accelkit repartition``.
- A **vanished** device stays in the maps (the allocations on it can still be freed) but is
  cordoned in the state directory with the reason :data:`VANISHED`, so no process grants it;
  the workloads holding it keep their allocations, are told (``device_unhealthy``) and are
  listed in the report. When the device is listed again, that cordon is lifted.
- Each change is published on the node's health board: kind ``"added"`` (old ``None``) or
  ``"removed"`` (new: unhealthy, :data:`VANISHED`; the device stays on the board while the
  node's maps hold it).

A plugin that fails or hangs in ``list_devices`` (``[plugins] call-timeout``) keeps its devices
as they were; the report and the node's warnings name it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from pathlib import Path

import attrs

from accelkit.calls import call_async
from accelkit.config.model import AllocationMode
from accelkit.health import DeviceHealth, HealthState
from accelkit.host import PartitionHost
from accelkit.host.host import device_info
from accelkit.host.pinning import PinnedAssignment, read_pinned
from accelkit.node.assignments import update_pinned
from accelkit.node.context_swap import reassign, widen_masks
from accelkit.node.health_board import DeviceChange
from accelkit.node.health_keeper import HealthKeeper
from accelkit.node.health_maps import fence_maps
from accelkit.partition import natural_sort_key
from accelkit.plugin import AbstractComputePlugin
from accelkit.types import AgentId, ComputeDevice, DeviceId, DeviceName
from accelkit.workload.ledger import Ledger

__all__ = ["VANISHED", "HeldDevice", "PluginRediscovery", "Rediscoverer", "RediscoveryReport"]

log = logging.getLogger(__name__)

#: the cordon reason (and health reason) of a device its plugin no longer lists
VANISHED = "vanished: no longer listed by its plugin"


def _ids(value: Iterable[str]) -> tuple[DeviceId, ...]:
    return tuple(sorted((DeviceId(str(v)) for v in value), key=natural_sort_key))


@attrs.frozen
class PluginRediscovery:
    """What one plugin's devices did since the last look; ids in natural order."""

    added: tuple[DeviceId, ...] = attrs.field(default=(), converter=_ids)
    removed: tuple[DeviceId, ...] = attrs.field(default=(), converter=_ids)
    unchanged: tuple[DeviceId, ...] = attrs.field(default=(), converter=_ids)
    #: added devices no agent got (split modes: until ``accelkit repartition``)
    unassigned: tuple[DeviceId, ...] = attrs.field(default=(), converter=_ids)
    #: why the plugin could not be asked ("" when it answered); its devices stay as they were
    error: str = ""
    #: agents given new contexts to follow a recorded repartition
    reassigned: tuple[AgentId, ...] = ()


@attrs.frozen
class HeldDevice:
    """A vanished device a workload still holds (the workload keeps it until released)."""

    plugin: DeviceName
    device_id: DeviceId
    agent_id: AgentId
    workload_id: str


@attrs.frozen
class RediscoveryReport:
    """Per plugin, what was added, removed and unchanged; the vanished devices still held."""

    plugins: Mapping[DeviceName, PluginRediscovery]
    held: tuple[HeldDevice, ...] = ()

    @property
    def changed(self) -> bool:
        """Some device was added or removed."""
        return any(p.added or p.removed for p in self.plugins.values())

    def messages(self) -> list[str]:
        """One line per change, per failed plugin and per vanished device still held."""
        lines: list[str] = []
        for key, found in self.plugins.items():
            if found.error:
                lines.append(f"plugin {key!r} rediscovery failed: {found.error}")
            lines += [f"device {key}/{d} added" for d in found.added if d not in found.unassigned]
            lines += [
                f"device {key}/{d} added, unassigned (accelkit repartition gives it to an agent)"
                for d in found.unassigned
            ]
            lines += [f"device {key}/{d} removed ({VANISHED}), cordoned" for d in found.removed]
            if found.reassigned:
                agents = ", ".join(found.reassigned)
                lines.append(f"plugin {key!r}: agents {agents} follow the recorded assignment")
        lines += [
            f"device {h.plugin}/{h.device_id} is gone but workload {h.workload_id!r} of agent "
            f"{h.agent_id!r} still holds it"
            for h in self.held
        ]
        return lines


class Rediscoverer:
    """Rediscovery for one node; it remembers which devices vanished (see module docstring)."""

    def __init__(
        self,
        host: PartitionHost,
        keeper: HealthKeeper,
        *,
        ledger: Callable[[], Ledger],
        call_timeout: Decimal | float,
        state_dir: Path | str,
        source: str | None = None,
    ) -> None:
        self.host = host
        self.state_dir = Path(state_dir)
        self.source = source
        self.keeper = keeper
        self._ledger = ledger
        self._timeout = float(call_timeout)
        #: vanished devices, kept in the plugins' device lists and maps, per plugin
        self.gone: dict[DeviceName, set[DeviceId]] = {}

    @property
    def joins(self) -> bool:
        """New devices join the agents' maps (SHARED mode or one agent), else wait unassigned."""
        return self.host.result.mode is AllocationMode.SHARED or len(self.host.agents) <= 1

    async def rediscover(self) -> RediscoveryReport:
        """Ask every plugin for its devices again and apply what changed."""
        self.keeper.sync_cordons()
        found: dict[DeviceName, PluginRediscovery] = {}
        for key, plugin in list(self.host.plugins.items()):
            try:
                listed = await self._list(key, plugin)
            except Exception as exc:  # a plugin's failure is reported, never the node's
                error = f"{type(exc).__name__}: {exc}"
                line = f"plugin {key!r} rediscovery failed: {error}"
                log.warning("%s", line)
                self._warn(line)
                found[key] = PluginRediscovery(error=error)
                continue
            found[key] = await self._apply(key, plugin, listed)
        if self.host.result.mode is AllocationMode.AUTO_SPLIT:
            await self._follow_pin(found)
        return RediscoveryReport(found, self._held(found))

    async def _follow_pin(self, found: dict[DeviceName, PluginRediscovery]) -> None:
        """Rebuild the contexts of agents whose devices a recorded repartition changed."""
        pinned = read_pinned(self.state_dir, source=self.source)
        if pinned is None or pinned.agents != tuple(self.host.agents):
            return
        for key, masks in pinned.devices.items():
            plugin = self.host.plugins.get(key)
            if plugin is None or key not in found or found[key].error:
                continue
            known = {d.device_id for d in plugin.devices}
            target = {a: tuple(d for d in ids if d in known) for a, ids in masks.items()}
            try:
                agents = await reassign(
                    self.host, key, target, call_timeout=self._timeout, fence=self._fence
                )
            except Exception as exc:  # a held device would move: keep the contexts as they are
                error = f"{type(exc).__name__}: {exc}"
                self._warn(f"plugin {key!r}: the recorded assignment: {error}")
                found[key] = attrs.evolve(found[key], error=error)
                continue
            given = {d for ids in target.values() for d in ids}
            found[key] = attrs.evolve(
                found[key],
                reassigned=agents,
                unassigned=tuple(d for d in found[key].unassigned if d not in given),
            )

    def _warn(self, line: str) -> None:
        """A warning of the node, once (a service that retries every round must not grow)."""
        if line not in self.host.warnings:
            self.host.add_warning(line)

    def _pin_current(self, key: DeviceName) -> None:
        """Record the agents' masks of ``key`` unless recorded: every process then agrees that
        a new device is unassigned (a fresh split would hand it, or others, around)."""
        agents = tuple(self.host.agents)
        masks = {a: tuple(v.contexts[key].device_mask) for a, v in self.host.agents.items()}

        def change(current: PinnedAssignment | None) -> PinnedAssignment | None:
            if current is not None and current.agents == agents and key in current.devices:
                return None
            base = current if current is not None and current.agents == agents else None
            return (base or PinnedAssignment(agents, {})).evolve(key, masks)

        update_pinned(self.state_dir, change, source=self.source)

    async def _list(
        self, key: DeviceName, plugin: AbstractComputePlugin
    ) -> dict[DeviceId, ComputeDevice]:
        devices = await call_async(key, "list_devices", self._timeout, plugin.list_devices)
        listed = {d.device_id: d for d in devices}
        if len(listed) != len(devices):
            msg = "list_devices returned duplicate device ids"
            raise ValueError(msg)
        return listed

    async def _apply(
        self, key: DeviceName, plugin: AbstractComputePlugin, listed: dict[DeviceId, ComputeDevice]
    ) -> PluginRediscovery:
        known = {d.device_id: d for d in plugin.devices}
        gone = self.gone.setdefault(key, set())
        new = [d for d in listed if d not in known]
        back = [d for d in listed if d in gone]
        vanished = [d for d in known if d not in listed and d not in gone]
        kept = [known[d] for d in known if d not in listed]
        plugin.remember_devices([*listed.values(), *kept])
        for device in vanished:
            gone.add(device)
            old = self._effective(key, device)
            self.keeper.cordon_file.cordon(key, device, VANISHED)
            health = DeviceHealth(HealthState.UNHEALTHY, VANISHED)
            self.keeper.board.publish(DeviceChange(key, device, old, health, "removed"))
        # the board knows a device's health before any map can grant it
        reports = await self._health_of(key, plugin) if new or back else {}
        for device in [*new, *back]:
            gone.discard(device)
            self._lift_vanished_cordon(key, device)
            old = None if device in new else self._effective(key, device)
            health = reports.get(device, DeviceHealth.healthy())
            self.keeper.board.publish(DeviceChange(key, device, old, health, "added"))
        for device in listed:
            if device not in new and device not in back:
                self._lift_vanished_cordon(key, device)  # left by an earlier process
        self.keeper.sync_cordons()
        unassigned: tuple[DeviceId, ...] = tuple(new)
        if new and self.joins:
            joined = await widen_masks(
                self.host, key, new, call_timeout=self._timeout, fence=self._fence
            )
            unassigned = () if joined else tuple(new)
        elif new:
            self.host.device_map[key] = device_info(plugin)
            if self.host.result.mode is AllocationMode.AUTO_SPLIT:
                self._pin_current(key)
        unchanged = [d for d in listed if d not in new and d not in back]
        return PluginRediscovery([*new, *back], vanished, unchanged, unassigned)

    async def _health_of(
        self, key: DeviceName, plugin: AbstractComputePlugin
    ) -> Mapping[DeviceId, DeviceHealth]:
        """The plugin's health reports (none when it fails: new devices count as healthy)."""
        try:
            reports = await call_async(key, "device_health", self._timeout, plugin.device_health)
        except Exception:
            log.warning("plugin %r device_health failed during rediscovery", key, exc_info=True)
            return {}
        if not isinstance(reports, Mapping):
            return {}
        return {d: h for d, h in reports.items() if isinstance(h, DeviceHealth)}

    def _fence(self) -> None:
        fence_maps(self.host, self.keeper.board)

    def _effective(self, key: DeviceName, device: DeviceId) -> DeviceHealth | None:
        return self.keeper.board.snapshot().get(key, {}).get(device)

    def _lift_vanished_cordon(self, key: DeviceName, device: DeviceId) -> None:
        cordon = self.keeper.board.cordons().get((key, device))
        if cordon is not None and cordon.reason == VANISHED:
            self.keeper.cordon_file.uncordon(key, device)

    def _held(self, found: Mapping[DeviceName, PluginRediscovery]) -> tuple[HeldDevice, ...]:
        ledger = self._ledger()
        held: list[HeldDevice] = []
        for key in found:
            devices = sorted(self.gone.get(key, ()), key=natural_sort_key)
            seen: set[tuple[str, str, str]] = set()
            for h in ledger.holders(key, list(devices)):
                if (h.device_id, h.agent_id, h.workload_id) not in seen:
                    seen.add((h.device_id, h.agent_id, h.workload_id))
                    held.append(HeldDevice(key, h.device_id, h.agent_id, h.workload_id))
        return tuple(held)
