"""Is a process still the one we recorded? A pid plus the process's start time says so.

A pid alone is not an identity: the kernel reuses pids. A :class:`ProcessStamp` pairs the pid with
psutil's ``create_time()`` (seconds since the epoch), kept as a decimal string. The epoch form
moves when the kernel's boot time is re-read after a clock adjustment, so two stamps match when
the start times differ by less than :data:`START_TIME_TOLERANCE`; a pid reused within that second
is not a practical concern. Zombies count as gone: they hold no resources and will never run again.
"""

from __future__ import annotations

import contextlib
import os
from decimal import Decimal, InvalidOperation

import attrs

from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr

#: start times closer than this are the same process (absorbs boot-time jitter)
START_TIME_TOLERANCE = Decimal(1)


def _start_time(value: str) -> str:
    try:
        number = Decimal(value)
    except (InvalidOperation, TypeError):
        msg = f"not a start time: {value!r}"
        raise ValueError(msg) from None
    if not number.is_finite() or number < 0:
        msg = f"not a start time: {value!r}"
        raise ValueError(msg)
    return value


@attrs.frozen(repr=False)
class ProcessStamp:
    """A process as recorded: its pid and its start time (psutil ``create_time``)."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    pid: int = attrs.field(validator=attrs.validators.gt(0))
    start_time: str = attrs.field(converter=_start_time)

    @classmethod
    def of(cls, pid: int) -> ProcessStamp | None:
        """The stamp of a running process, or ``None`` when there is no such process."""
        if (stat := _proc_stat(pid)) is not None:  # psutil's create_time, without psutil
            state, created = stat
            return None if state is None else cls(pid, repr(created))
        import psutil  # only where /proc cannot say

        try:
            created = psutil.Process(pid).create_time()
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            return None
        return cls(pid, repr(created))

    def is_running(self) -> bool:
        """True when the pid exists, is not a zombie, and started when recorded."""
        if (stat := _proc_stat(self.pid)) is not None:  # one read where /proc has it
            state, created = stat
            if state is None:
                return False
            return state != "Z" and self._started_at(created)
        import psutil  # only where /proc cannot say

        try:
            process = psutil.Process(self.pid)
            created = process.create_time()
            if process.status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.AccessDenied:
            return True  # someone else's live process holds the pid: cannot be ours, but alive
        except (psutil.NoSuchProcess, ProcessLookupError):
            return False
        return self._started_at(created)

    def _started_at(self, created: float) -> bool:
        return abs(Decimal(repr(created)) - Decimal(self.start_time)) < START_TIME_TOLERANCE


#: the kernel's clock ticks per second, and the boot time psutil adds to a start in ticks
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_boot: list[float] = []


def _boot_time() -> float:
    """psutil's ``boot_time()`` on Linux (the ``btime`` of ``/proc/stat``), read the same way,
    so that a command that only stamps processes need not import psutil."""
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/stat", "rb") as stat:
        for line in stat:
            if line.startswith(b"btime"):
                return float(line.split()[1])
    import psutil  # no btime line: psutil knows the platform

    return psutil.boot_time()


def _proc_stat(pid: int) -> tuple[str | None, float] | None:
    """A process's state letter and start time (psutil's ``create_time``) from one read of
    ``/proc/PID/stat``: ``(None, 0)`` when there is no such process, ``None`` when /proc
    cannot say (not Linux, a hidden pid): psutil is asked then.

    ``status`` calls a live process 2,000 times; psutil reads the file twice for it.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except FileNotFoundError:
        return (None, 0.0) if os.path.isdir("/proc/self") else None
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 20 or not fields[19].isdigit():
        return None
    if not _boot:
        _boot.append(_boot_time())
    return fields[0].decode("ascii", "replace"), int(fields[19]) / _TICKS + _boot[0]
