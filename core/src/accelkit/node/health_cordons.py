"""Cordons in the state directory: which devices operators took out of allocation.

``<state-dir>/cordons.json`` holds them for every accelkit process of the node::

    {"format": "accelkit-cordons/1",
     "cordons": [{"plugin": "cuda", "device": "cuda1", "reason": "fan", "since": "1718000000.5"}]}

A change replaces the file (written to a temporary file, synced, renamed, directory synced)
under an exclusive ``flock`` of ``cordons.lock``, so concurrent ``accelkit cordon`` commands
never lose each other's change and a crash leaves the old or the new file, never half of one.
Readers need no lock; :meth:`CordonFile.read_if_changed` costs one ``stat`` when nothing changed,
which is what a node does before each booking.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import unicodedata
from collections.abc import Iterator, Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from accelkit.errors import ConfigError, InvalidResourceArgument
from accelkit.health import now
from accelkit.node.health_board import Cordon
from accelkit.types import DeviceId, DeviceName
from accelkit.workload.state_dir import KEY, secure_file, secure_state_dir

__all__ = ["CORDONS_FILE", "MAX_REASON", "CordonFile", "Cordons", "check_reason"]

CORDONS_FILE = "cordons.json"
LOCK_FILE = "cordons.lock"
FORMAT = "accelkit-cordons/1"

#: the longest reason a cordon keeps (it is printed by ``status``, ``devices`` and metrics)
MAX_REASON = 1000

Cordons = Mapping[tuple[DeviceName, DeviceId], Cordon]
_Signature = tuple[int, int, int] | None


def check_reason(reason: object) -> str:
    """``reason`` when it is one line of at most :data:`MAX_REASON` characters with no control
    characters (a terminal would act on them where the reason is printed); else
    ``InvalidResourceArgument``."""
    if not isinstance(reason, str):
        msg = f"a cordon reason is text, not {type(reason).__name__}"
        raise InvalidResourceArgument(msg)
    if len(reason) > MAX_REASON:
        msg = f"a cordon reason is at most {MAX_REASON:,} characters, got {len(reason):,}"
        raise InvalidResourceArgument(msg)
    if any(unicodedata.category(c) == "Cc" for c in reason):
        msg = f"a cordon reason is one line of text with no control characters, got {reason!r}"
        raise InvalidResourceArgument(msg)
    return reason


class CordonFile:
    """The cordons of one state directory."""

    def __init__(self, state_dir: Path | str, *, source: str | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / CORDONS_FILE
        self.source = source
        self._seen: _Signature = None
        self._read_once = False

    def _error(self, what: str) -> ConfigError:
        return ConfigError(f"cordons {str(self.path)!r}: {what}", file=self.source, key=KEY)

    def _signature(self) -> _Signature:
        try:
            info = os.lstat(self.path)  # a link to nothing is a link (refused), not no file
        except FileNotFoundError:
            return None
        except OSError as exc:
            msg = f"cannot read it: {exc.strerror or exc}"
            raise self._error(msg) from exc
        return (info.st_ino, info.st_mtime_ns, info.st_size)

    def read(self) -> dict[tuple[DeviceName, DeviceId], Cordon]:
        """Every cordon (none when the file does not exist)."""
        signature = self._signature()
        self._seen, self._read_once = signature, True
        if signature is None:
            return {}
        secure_file(self.path, source=self.source)
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            msg = f"cannot parse it ({exc}); remove it to clear every cordon"
            raise self._error(msg) from exc
        return self._parse(data)

    def read_if_changed(self) -> dict[tuple[DeviceName, DeviceId], Cordon] | None:
        """The cordons if the file changed since the last read, else ``None`` (one ``stat``)."""
        if self._read_once and self._signature() == self._seen:
            return None
        return self.read()

    def _parse(self, data: Any) -> dict[tuple[DeviceName, DeviceId], Cordon]:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            msg = f"not a cordon file (expected format {FORMAT!r}); remove it to clear them"
            raise self._error(msg)
        cordons: dict[tuple[DeviceName, DeviceId], Cordon] = {}
        entries = data.get("cordons")
        for i, entry in enumerate(entries if isinstance(entries, list) else [None]):
            try:
                plugin, device = entry["plugin"], entry["device"]
                reason, since = entry["reason"], Decimal(entry["since"])
            except (TypeError, KeyError, InvalidOperation) as exc:
                msg = f"entry {i} is malformed ({type(exc).__name__}: {exc})"
                raise self._error(msg) from exc
            if not all(isinstance(v, str) for v in (plugin, device, reason)):
                msg = f"entry {i}: plugin, device and reason must be strings"
                raise self._error(msg)
            cordons[(DeviceName(plugin), DeviceId(device))] = Cordon(reason, since)
        return cordons

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        secure_state_dir(self.state_dir, source=self.source)
        lock = self.state_dir / LOCK_FILE
        secure_file(lock, source=self.source, create=True)
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def cordon(self, plugin: str, device: str, reason: str) -> bool:
        """Cordon a device; ``False`` when it already was (its first reason is kept)."""
        check_reason(reason)
        with self._locked():
            cordons = self.read()
            key = (DeviceName(plugin), DeviceId(device))
            if key in cordons:
                return False
            cordons[key] = Cordon(reason, now())
            self._write(cordons)
            return True

    def uncordon(self, plugin: str, device: str) -> bool:
        """Take a device's cordon away; ``False`` when it had none."""
        with self._locked():
            cordons = self.read()
            if cordons.pop((DeviceName(plugin), DeviceId(device)), None) is None:
                return False
            self._write(cordons)
            return True

    def _write(self, cordons: Cordons) -> None:
        body = {
            "format": FORMAT,
            "cordons": [
                {"plugin": p, "device": d, "reason": c.reason, "since": str(c.since)}
                for (p, d), c in sorted(cordons.items())
            ],
        }
        tmp = self.path.with_name(f".{CORDONS_FILE}.{os.getpid()}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)  # left by a writer of this pid that was killed
            with os.fdopen(os.open(tmp, flags, 0o600), "wb") as out:
                out.write(json.dumps(body, indent=1).encode() + b"\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
            dir_fd = os.open(self.state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            msg = f"cannot write it: {exc.strerror or exc}"
            raise self._error(msg) from exc
