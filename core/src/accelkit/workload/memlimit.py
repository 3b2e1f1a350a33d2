"""How a process tree's memory limit is enforced: a cgroup v2 child group, else ``RLIMIT_AS``.

A cgroup v2 child of our own cgroup is used when the host lets us create one with a
``memory.max`` file (the memory controller delegated to us, write access); the limit then covers
the whole tree, and ``memory.swap.max`` is set to 0 where it exists so swap cannot dodge it.
Otherwise the limit falls back to ``RLIMIT_AS`` on the leader, which its children inherit, each
on its own (it bounds address space, not resident memory). :attr:`MemoryLimit.description` says
which, for the run's output.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import signal
from pathlib import Path

import attrs

from accelkit.cgroup import CgroupFS
from accelkit.sizes import format_binary_size

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class LimitMethod(enum.StrEnum):
    """Where the limit lives."""

    NONE = "none"
    CGROUP = "cgroup-v2"
    RLIMIT = "rlimit-as"


@attrs.frozen
class MemoryLimit:
    """The chosen enforcement of one workload's memory limit."""

    method: LimitMethod
    limit: int | None = None
    cgroup_dir: Path | None = None
    reason: str = ""

    @property
    def description(self) -> str:
        """One line for the run's output."""
        if self.method is LimitMethod.NONE or self.limit is None:
            return "no memory limit"
        size = format_binary_size(self.limit)
        if self.method is LimitMethod.CGROUP:
            return f"memory limit {size} through cgroup v2 group {self.cgroup_dir}"
        why = f" ({self.reason})" if self.reason else ""
        return f"memory limit {size} through RLIMIT_AS{why}"

    def remove(self) -> None:
        """Kill what is left in the child group and delete it; no-op for other methods."""
        if self.cgroup_dir is None:
            return
        procs = self.cgroup_dir / "cgroup.procs"
        kill = self.cgroup_dir / "cgroup.kill"
        with contextlib.suppress(OSError):
            if kill.exists():
                kill.write_text("1")
            else:
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.cgroup_dir.rmdir()


def choose_memory_limit(
    limit: int | None, workload_id: str, *, root: Path | str = "/"
) -> MemoryLimit:
    """Create a cgroup v2 child group for ``limit`` when possible, else plan ``RLIMIT_AS``."""
    if limit is None:
        return MemoryLimit(LimitMethod.NONE)
    try:
        cgroups = CgroupFS.read(root)
        parent = cgroups.process_directory("memory")
    except (OSError, ValueError) as exc:
        return MemoryLimit(LimitMethod.RLIMIT, limit, reason=f"cgroups unreadable: {exc}")
    if parent is None or parent.version != 2:
        return MemoryLimit(LimitMethod.RLIMIT, limit, reason="no cgroup v2 memory controller")
    child = parent.path / f"accelkit-{_UNSAFE.sub('-', workload_id)}"
    try:
        child.mkdir()
    except OSError as exc:
        return MemoryLimit(LimitMethod.RLIMIT, limit, reason=f"cannot create a cgroup: {exc}")
    try:
        (child / "memory.max").write_text(str(limit))
    except OSError as exc:
        with contextlib.suppress(OSError):
            child.rmdir()
        reason = f"memory controller not delegated: {exc.strerror or exc}"
        return MemoryLimit(LimitMethod.RLIMIT, limit, reason=reason)
    with contextlib.suppress(OSError):
        (child / "memory.swap.max").write_text("0")
    return MemoryLimit(LimitMethod.CGROUP, limit, cgroup_dir=child)
