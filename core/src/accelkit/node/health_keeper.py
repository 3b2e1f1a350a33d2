"""Health in a running node: asks the plugins, applies cordons, fences the alloc maps.

The keeper owns the node's :class:`HealthBoard`. After every change of a device's effective
health it tells every alloc map that can grant the device (the shared map of a plugin in
SHARED mode, each agent's own map in the split modes) which devices take no new grant, through
``set_unavailable``; a device back to health is granted again with no further step. Workloads
holding a device that turns unallocatable get a ``device_unhealthy`` workload event and a
health note in the ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from decimal import Decimal

from accelkit.calls import call_async, iterate
from accelkit.events import WorkloadEvent, WorkloadPhase
from accelkit.health import DeviceHealth, HealthEvent, HealthState
from accelkit.host import PartitionHost
from accelkit.node.health_board import DeviceChange, HealthBoard
from accelkit.node.health_cordons import CordonFile
from accelkit.node.health_maps import fence_maps, install_fences
from accelkit.node.health_notes import HealthNote, add_notes, latest_unhealthy
from accelkit.plugin import AbstractComputePlugin
from accelkit.types import AgentId, DeviceId, DeviceName
from accelkit.workload.ledger import Ledger
from accelkit.workload.record import LedgerRecord

__all__ = ["HealthKeeper"]

log = logging.getLogger(__name__)

Notify = Callable[[WorkloadEvent], None]


class HealthKeeper:
    """The health side of a :class:`~accelkit.node.Node` (see the module docstring)."""

    def __init__(
        self,
        host: PartitionHost,
        cordons: CordonFile,
        *,
        ledger: Callable[[], Ledger],
        notify: Notify,
        call_timeout: Decimal | float,
    ) -> None:
        self.host = host
        self.board = HealthBoard(on_publish=lambda change: self.settle([change]))
        self.cordon_file = cordons
        self._ledger = ledger
        self._notify = notify
        self._timeout = call_timeout
        # plugins whose last device_health call failed: a long-running node warns the operator
        # once per outage, not once per refresh
        self._failing: set[DeviceName] = set()

    # -- refreshing ------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Fence the maps that cannot fence themselves (:func:`install_fences`) and put every
        discovered device on the board, healthy until its plugin says otherwise."""
        install_fences(self.host)
        for key, plugin in self.host.plugins.items():
            for device in plugin.devices:
                self.board.report(key, device.device_id, DeviceHealth.healthy())

    async def refresh(self) -> list[DeviceChange]:
        """Ask every plugin (under call-timeout), re-read the cordons, fence the maps.

        A plugin that fails or hangs keeps its devices' last health (logged, and a warning
        of the node); a device a plugin leaves out keeps its last health too.
        """
        changes: list[DeviceChange] = []
        for key, plugin in self.host.plugins.items():
            reports = await self._ask(key, plugin)
            known = {d.device_id for d in plugin.devices}
            for device, health in reports.items():
                if device not in known:
                    log.warning("plugin %r reports health of unknown device %r", key, device)
                    continue
                if (change := self.board.report(key, device, health)) is not None:
                    changes.append(change)
        changes += self.board.set_cordons(self.cordon_file.read())
        self.settle(changes)
        self._note_recoveries()
        return changes

    def _note_recoveries(self) -> None:
        """Follow each unhealthy note of a device that is allocatable now with a recovery note.

        Another process may have seen the device recover, or nobody did; either way the
        next loss must be news again (notes of the same news are deduplicated).
        """
        try:
            stale = latest_unhealthy(self._ledger())
        except Exception:
            log.warning("reading health notes failed", exc_info=True)
            return
        recovered: list[HealthNote] = []
        snapshot = self.board.snapshot()
        for note in stale:
            health = snapshot.get(DeviceName(note.plugin), {}).get(DeviceId(note.device))
            if health is not None and health.allocatable:
                change = DeviceChange(
                    DeviceName(note.plugin), DeviceId(note.device), None, health, "health"
                )
                recovered.append(_note(note.agent, note.workload_id, change, health))
        if recovered:
            try:
                add_notes(self._ledger(), recovered)
            except Exception:
                log.warning("recording health notes failed", exc_info=True)

    async def _ask(
        self, key: DeviceName, plugin: AbstractComputePlugin
    ) -> Mapping[DeviceId, DeviceHealth]:
        try:
            reports = await call_async(key, "device_health", self._timeout, plugin.device_health)
            if not isinstance(reports, Mapping) or not all(
                isinstance(h, DeviceHealth) for h in reports.values()
            ):
                msg = f"expected a mapping of device id to DeviceHealth, got {reports!r:.200}"
                raise TypeError(msg)
        except Exception as exc:  # a plugin's failure is reported, never the node's
            line = f"plugin {key!r} device_health failed: {type(exc).__name__}: {exc}"
            log.warning("%s", line, exc_info=True)
            if key not in self._failing:
                self._failing.add(key)
                self.host.add_warning(line)
            return {}
        self._failing.discard(key)
        return reports

    def sync_cordons(self) -> list[DeviceChange]:
        """Apply cordons changed by another process; one ``stat`` when none did."""
        cordons = self.cordon_file.read_if_changed()
        if cordons is None:
            return []
        changes = self.board.set_cordons(cordons)
        self.settle(changes)
        return changes

    async def cordon(self, plugin: str, device: str, reason: str = "") -> bool:
        """Take a device out of allocation for every process of the node; ``False`` if it was.

        Raises ``InvalidResourceArgument`` for a plugin or device the node does not have, and
        for a reason that is not one line of at most 1,000 characters without control
        characters.
        """
        self.board.of(plugin, device)  # names an unknown plugin or device
        changed = self.cordon_file.cordon(plugin, device, reason)
        self.sync_cordons()
        return changed

    async def uncordon(self, plugin: str, device: str) -> bool:
        """Put a cordoned device back into allocation; ``False`` if it was not cordoned.

        A device that is gone from the node may still be uncordoned; any other device the
        node does not have raises ``InvalidResourceArgument``.
        """
        self.sync_cordons()
        if (DeviceName(plugin), DeviceId(device)) not in self.board.cordons():
            self.board.of(plugin, device)
        changed = self.cordon_file.uncordon(plugin, device)
        self.sync_cordons()
        return changed

    def apply_event(self, plugin: DeviceName, event: HealthEvent) -> DeviceChange | None:
        """A plugin's health event: update the board, fence the maps, tell the holders."""
        known = {d.device_id for d in self.host.plugins[plugin].devices}
        if event.device_id not in known:
            log.warning("plugin %r: health event of unknown device %r", plugin, event.device_id)
            return None
        change = self.board.report(plugin, event.device_id, event.new)
        if change is not None:
            self.settle([change])
        return change

    def settle(self, changes: Iterable[DeviceChange]) -> None:
        """Fence the maps after ``changes`` and tell the workloads that hold a lost device."""
        changes = list(changes)
        if not changes:
            return
        fence_maps(self.host, self.board)
        moved = [c for c in changes if c.turned_unallocatable or _turned_allocatable(c)]
        if moved:
            self._tell_holders(moved)

    # -- the workloads that hold a device that changed -----------------------------------------

    def _tell_holders(self, moved: list[DeviceChange]) -> None:
        """A note for each holder; a ``device_unhealthy`` event for each newly told of a loss.

        Every accelkit process that starts sees the same change; the ledger's notes make sure
        a workload is told once per change, whichever process saw it first.
        """
        ledger = self._ledger()
        notes: list[HealthNote] = []
        for change in moved:
            health = change.new
            if health is None:
                continue
            for holding in ledger.holders(change.plugin, [change.device_id]):
                notes.append(_note(holding.agent_id, holding.workload_id, change, health))
        try:
            added = add_notes(ledger, notes)
        except Exception:
            log.warning("recording health notes failed", exc_info=True)
            added = notes
        held: dict[tuple[str, str], list[HealthNote]] = {}
        for note in added:
            if note.state == HealthState.UNHEALTHY.value:
                held.setdefault((note.agent, note.workload_id), []).append(note)
        for (agent, workload_id), lost in held.items():
            record = ledger.read(agent, workload_id)
            if record is not None:
                self._notify(_event(record, lost))

    # -- watching --------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Run every plugin's ``watch_health()`` while the block runs; cancelled on exit."""
        tasks = [
            asyncio.create_task(self._watch(key, plugin), name=f"watch_health:{key}")
            for key, plugin in self.host.plugins.items()
        ]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch(self, key: DeviceName, plugin: AbstractComputePlugin) -> None:
        try:
            async for event in iterate(key, "watch_health", plugin.watch_health):
                self.apply_event(key, event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            line = f"plugin {key!r} watch_health failed: {type(exc).__name__}: {exc}"
            log.warning("%s", line, exc_info=True)
            self.host.add_warning(line)


def _turned_allocatable(change: DeviceChange) -> bool:
    return (
        change.old is not None
        and not change.old.allocatable
        and change.new is not None
        and change.new.allocatable
    )


def _note(
    agent: AgentId, workload_id: str, change: DeviceChange, health: DeviceHealth
) -> HealthNote:
    text = f"device {change.plugin}/{change.device_id} turned {health.state.value}"
    if health.reason:
        text += f": {health.reason}"
    return HealthNote(
        agent,
        workload_id,
        str(health.since),
        change.plugin,
        change.device_id,
        health.state.value,
        text,
    )


def _event(record: LedgerRecord, lost: list[HealthNote]) -> WorkloadEvent:
    devices: dict[DeviceName, tuple[DeviceId, ...]] = {}
    for note in lost:
        plugin = DeviceName(note.plugin)
        devices[plugin] = (*devices.get(plugin, ()), DeviceId(note.device))
    log.warning(
        "workload %r of agent %r holds unhealthy devices %s",
        record.workload.id,
        record.agent_id,
        devices,
    )
    return WorkloadEvent(
        record.agent_id,
        record.workload,
        WorkloadPhase.DEVICE_UNHEALTHY,
        dict(record.allocation),
        devices=devices,
        reason="; ".join(note.text for note in lost),
    )
