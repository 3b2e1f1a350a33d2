"""Mock device health: ``health`` / ``health-reason`` per device, re-read from the device file.

Tests and demos flip a device by rewriting the device file while accelkit runs; the file is
read again only when its modification time (or size, or inode) changed. A file that cannot be
read at that moment (half written, a typo) keeps the last good reports, and is logged.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from accelkit import ConfigError
from accelkit.health import DeviceHealth, HealthState
from accelkit.types import DeviceId
from accelkit_mock.spec import MockKind, load_kinds

__all__ = ["HealthFile"]

log = logging.getLogger(__name__)

Reports = dict[DeviceId, DeviceHealth]


def reports_of(kind: MockKind) -> Reports:
    """Each device's health as the kind declares it, stamped now."""
    return {
        DeviceId(d.id): DeviceHealth(HealthState(d.health), d.health_reason) for d in kind.devices
    }


def _same(a: DeviceHealth | None, b: DeviceHealth) -> bool:
    return a is not None and a.state is b.state and a.reason == b.reason


class HealthFile:
    """The health of one kind's devices, following its device file (inline kinds: fixed)."""

    def __init__(self, kind: MockKind, config: Mapping[str, object]) -> None:
        self.key = kind.key
        path = config.get("config-file")
        self.path = Path(path) if isinstance(path, str) and path else None
        self._config = config
        self._known = frozenset(DeviceId(d.id) for d in kind.devices)
        self._signature = self._stat()
        self._reports = reports_of(kind)

    def _stat(self) -> tuple[int, int, int] | None:
        if self.path is None:
            return None
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return (info.st_ino, info.st_mtime_ns, info.st_size)

    def know(self, devices: Iterable[str]) -> None:
        """Follow these devices too (a rediscovery listed them); healthy until the file says."""
        for device in map(DeviceId, devices):
            if device not in self._known:
                self._known |= {device}
                self._reports.setdefault(device, DeviceHealth.healthy())
                self._signature = None  # read the file again for the new device's health

    def changed(self) -> bool:
        """Whether the device file changed since it was last read."""
        return self.path is not None and self._stat() != self._signature

    def current(self) -> Reports:
        """The devices' health now: the file is read again when it changed."""
        if not self.changed():
            return dict(self._reports)
        signature = self._stat()
        try:
            kinds = load_kinds(self._config)
        except ConfigError as exc:
            log.warning("mock %r: keeping the last health, the device file: %s", self.key, exc)
            return dict(self._reports)
        self._signature = signature
        for kind in kinds:
            if kind.key == self.key:
                fresh = reports_of(kind)
                for device in self._known:
                    if device in fresh:
                        old = self._reports.get(device)
                        new = fresh[device]
                        self._reports[device] = old if old and _same(old, new) else new
        return dict(self._reports)
