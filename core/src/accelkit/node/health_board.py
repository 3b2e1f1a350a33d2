"""The node's health board: each device's effective health, and the changes as they happen.

Effective health merges what the plugin reports with the operator's cordons: a cordoned device
reads as ``UNHEALTHY`` with the reason ``"cordoned: <reason>"`` whatever its plugin says. Every
change of a device's effective health (and every device added or removed) is published as a
:class:`DeviceChange` to each subscriber of :meth:`HealthBoard.changes`. Subscribers read from a
bounded queue of their own: a slow one never blocks the node, it loses its oldest changes
instead, and :attr:`Subscription.dropped` counts them.

The board lives in one event loop: publish and subscribe from that loop's thread.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Mapping
from decimal import Decimal
from types import TracebackType
from typing import Literal

import attrs

from accelkit.errors import InvalidResourceArgument
from accelkit.health import DeviceHealth, HealthState
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import DeviceId, DeviceName

__all__ = ["CORDON_PREFIX", "ChangeKind", "DeviceChange", "HealthBoard", "Subscription"]

ChangeKind = Literal["health", "cordon", "added", "removed"]
_KINDS: frozenset[str] = frozenset({"health", "cordon", "added", "removed"})

#: how a cordon's reason starts in the effective health
CORDON_PREFIX = "cordoned: "

#: changes a subscriber may have waiting before its oldest are dropped
QUEUE_SIZE = 1024


def _kind(value: str) -> ChangeKind:
    if value not in _KINDS:
        msg = f"unknown change kind {value!r} (use one of {sorted(_KINDS)})"
        raise ValueError(msg)
    return value  # type: ignore[return-value]  # checked against the literal's values


@attrs.frozen(repr=False)
class DeviceChange:
    """A device's effective health went from ``old`` to ``new`` (``None``: added / removed)."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    plugin: DeviceName
    device_id: DeviceId
    old: DeviceHealth | None
    new: DeviceHealth | None
    kind: ChangeKind = attrs.field(default="health", converter=_kind)

    @property
    def turned_unallocatable(self) -> bool:
        """The device could take grants before and cannot now."""
        was = self.old is not None and self.old.allocatable
        return was and self.new is not None and not self.new.allocatable


@attrs.frozen(repr=False)
class Cordon:
    """An operator took a device out of allocation: why, and since when."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    reason: str
    since: Decimal

    def health(self) -> DeviceHealth:
        """The effective health of a cordoned device."""
        return DeviceHealth(HealthState.UNHEALTHY, f"{CORDON_PREFIX}{self.reason}", self.since)


def _same(a: DeviceHealth | None, b: DeviceHealth | None) -> bool:
    """Equal state and reason (a new timestamp alone is no change)."""
    if a is None or b is None:
        return a is b
    return a.state is b.state and a.reason == b.reason


class Subscription:
    """One subscriber's changes, oldest first; an async iterator (and context manager)."""

    def __init__(self, board: HealthBoard, size: int) -> None:
        self._board = board
        self._queue: asyncio.Queue[DeviceChange] = asyncio.Queue(maxsize=size)
        #: changes lost because this subscriber fell more than the queue's size behind
        self.dropped = 0

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> DeviceChange:
        return await self._queue.get()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def pending(self) -> int:
        """Changes published and not read yet."""
        return self._queue.qsize()

    def get_nowait(self) -> DeviceChange | None:
        """The oldest unread change, or ``None`` when there is none."""
        try:
            return self._queue.get_nowait()
        except asyncio.QueueEmpty:
            return None

    def put(self, change: DeviceChange) -> None:
        """Queue ``change``; when full, drop the oldest and count it."""
        while True:
            try:
                self._queue.put_nowait(change)
                return
            except asyncio.QueueFull:
                self._queue.get_nowait()
                self.dropped += 1

    def close(self) -> None:
        """Stop receiving changes."""
        self._board.unsubscribe(self)


class HealthBoard:
    """Effective health per (plugin, device) and the fan-out of its changes."""

    def __init__(
        self,
        *,
        queue_size: int = QUEUE_SIZE,
        on_publish: Callable[[DeviceChange], None] | None = None,
    ) -> None:
        if queue_size < 1:
            msg = f"a subscriber's queue size must be at least 1, got {queue_size}"
            raise ValueError(msg)
        self._reported: dict[DeviceName, dict[DeviceId, DeviceHealth]] = {}
        self._cordons: dict[tuple[DeviceName, DeviceId], Cordon] = {}
        self._subscribers: list[Subscription] = []
        self._transitions: collections.Counter[tuple[DeviceName, DeviceId]] = collections.Counter()
        self._queue_size = queue_size
        #: told of every change :meth:`publish` applies (the node fences its maps with it)
        self._on_publish = on_publish

    # -- reading ---------------------------------------------------------------------------------

    def of(self, plugin: DeviceName | str, device: DeviceId | str) -> DeviceHealth:
        """The device's effective health (a cordon reads as UNHEALTHY, "cordoned: ...").

        Raises ``InvalidResourceArgument`` for a plugin or device the board does not know.
        """
        devices = self._reported.get(DeviceName(plugin))
        if devices is None:
            known = ", ".join(sorted(self._reported)) or "none"
            msg = f"no plugin {plugin!r} on this node (plugins: {known})"
            raise InvalidResourceArgument(msg)
        reported = devices.get(DeviceId(device))
        if reported is None:
            known = ", ".join(sorted(devices)) or "none"
            msg = f"plugin {plugin!r} has no device {device!r} (devices: {known})"
            raise InvalidResourceArgument(msg)
        return self._effective(DeviceName(plugin), DeviceId(device), reported)

    def _effective(
        self, plugin: DeviceName, device: DeviceId, reported: DeviceHealth
    ) -> DeviceHealth:
        cordon = self._cordons.get((plugin, device))
        return reported if cordon is None else cordon.health()

    def snapshot(self) -> Mapping[DeviceName, Mapping[DeviceId, DeviceHealth]]:
        """Every known device's effective health, per plugin."""
        return {
            plugin: {
                device: self._effective(plugin, device, health)
                for device, health in devices.items()
            }
            for plugin, devices in self._reported.items()
        }

    def unallocatable(self, plugin: DeviceName | str) -> frozenset[DeviceId]:
        """The plugin's devices that take no new grant now (unhealthy or cordoned)."""
        devices = self._reported.get(DeviceName(plugin), {})
        return frozenset(
            device
            for device, health in devices.items()
            if not self._effective(DeviceName(plugin), device, health).allocatable
        )

    def cordons(self) -> Mapping[tuple[DeviceName, DeviceId], Cordon]:
        """The cordons the board applies."""
        return dict(self._cordons)

    def transitions(self) -> Mapping[tuple[DeviceName, DeviceId], int]:
        """How often each device's effective state changed (for the transitions counter)."""
        return dict(self._transitions)

    # -- changing --------------------------------------------------------------------------------

    def report(
        self, plugin: DeviceName | str, device: DeviceId | str, health: DeviceHealth
    ) -> DeviceChange | None:
        """Record what the plugin says of a device; the change published, if any.

        A device the board did not know is added (published as kind ``"added"``).
        """
        key = (DeviceName(plugin), DeviceId(device))
        devices = self._reported.setdefault(key[0], {})
        before = devices.get(key[1])
        old = None if before is None else self._effective(*key, before)
        if before is not None and _same(before, health):
            return None
        devices[key[1]] = health
        new = self._effective(*key, health)
        if before is not None and _same(old, new):
            return None
        change = DeviceChange(*key, old, new, "added" if before is None else "health")
        self._fan_out(change)
        return change

    def forget(self, plugin: DeviceName | str, device: DeviceId | str) -> DeviceChange | None:
        """A device is gone: drop it and publish its removal (``None`` if it was not known)."""
        key = (DeviceName(plugin), DeviceId(device))
        before = self._reported.get(key[0], {}).pop(key[1], None)
        if before is None:
            return None
        change = DeviceChange(*key, self._effective(*key, before), None, "removed")
        self._fan_out(change)
        return change

    def set_cordons(
        self, cordons: Mapping[tuple[DeviceName, DeviceId], Cordon]
    ) -> list[DeviceChange]:
        """Replace the cordons; a change (kind ``"cordon"``) for each known device affected."""
        touched = set(self._cordons) | set(cordons)
        before = {key: self._known(key) for key in touched}
        self._cordons = dict(cordons)
        changes: list[DeviceChange] = []
        for key in sorted(touched):
            reported = self._reported.get(key[0], {}).get(key[1])
            old = before[key]
            if reported is None or old is None:
                continue
            new = self._effective(*key, reported)
            if not _same(old, new):
                change = DeviceChange(*key, old, new, "cordon")
                self._fan_out(change)
                changes.append(change)
        return changes

    def _known(self, key: tuple[DeviceName, DeviceId]) -> DeviceHealth | None:
        reported = self._reported.get(key[0], {}).get(key[1])
        return None if reported is None else self._effective(*key, reported)

    def publish(self, change: DeviceChange) -> None:
        """Apply a change made elsewhere (e.g. rediscovery) and hand it to every subscriber.

        ``"added"``/``"health"`` record ``change.new`` as the reported health, ``"removed"``
        forgets the device; ``"cordon"`` changes are only fanned out (cordons come from the
        state directory, see :meth:`set_cordons`). A node's board then fences the alloc maps
        and tells the workloads holding the device, as for the changes it finds itself.
        """
        key = (change.plugin, change.device_id)
        if change.kind != "cordon":
            if change.new is None:
                self._reported.get(key[0], {}).pop(key[1], None)
            else:
                self._reported.setdefault(key[0], {})[key[1]] = change.new
        self._fan_out(change)
        if self._on_publish is not None:
            self._on_publish(change)

    def _fan_out(self, change: DeviceChange) -> None:
        if (
            change.old is not None
            and change.new is not None
            and change.old.state is not change.new.state
        ):
            self._transitions[(change.plugin, change.device_id)] += 1
        for subscriber in list(self._subscribers):
            subscriber.put(change)

    # -- subscribing -----------------------------------------------------------------------------

    def changes(self) -> Subscription:
        """Subscribe now: every change published from here on, oldest first.

        Iterate it with ``async for``; ``close()`` it (or use ``async with``) when done.
        """
        subscription = Subscription(self, self._queue_size)
        self._subscribers.append(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """Stop handing changes to ``subscription`` (no error if it already stopped)."""
        if subscription in self._subscribers:
            self._subscribers.remove(subscription)

    @property
    def subscribers(self) -> int:
        """How many subscriptions are open."""
        return len(self._subscribers)
