"""What a child process inherits from the thread that starts it, as one comparable value.

A launcher kept ready for the next workload (:mod:`accelkit.runtime.spare`) was started
earlier, with what this process had then: the next workload may take it only if a launcher
started now would get the same. The workload's environment, cgroups, CPU affinity (when the
workload has one), terminal and containment come with its plan, its session is always a new
one and it inherits no descriptor but the standard three; what remains is compared here:

- the working directory (the directory itself: its device and inode);
- the standard input, output and error (the file each is open on, or closed);
- the umask, user and group ids, supplementary groups, capabilities, ``no_new_privs``,
  seccomp mode, blocked and ignored signals, and allowed CPUs and memory nodes of the
  calling thread (``/proc/thread-self/status``);
- the resource limits, the nice value and the OOM score adjustment;
- the launcher's own interpreter's environment (the workload's is the plan's).

A descriptor redirected to another open file description of the very same file (the same
device and inode) is not told apart: the kernel exposes no identity for a description short
of ``kcmp(2)``.
"""

from __future__ import annotations

import os
import resource

__all__ = ["SpawnState", "spawn_state"]

#: a snapshot of what a child would inherit; equal snapshots, the same inheritance
SpawnState = tuple[object, ...]

#: the lines of ``/proc/thread-self/status`` that a child inherits and this process may change
_STATUS_KEYS = frozenset(
    {
        "Umask",
        "Uid",
        "Gid",
        "Groups",
        "SigBlk",
        "SigIgn",
        "CapInh",
        "CapPrm",
        "CapEff",
        "CapBnd",
        "CapAmb",
        "NoNewPrivs",
        "Seccomp",
        "Cpus_allowed_list",
        "Mems_allowed_list",
    }
)
_LIMITS = tuple(
    getattr(resource, name) for name in sorted(dir(resource)) if name.startswith("RLIMIT_")
)


def _file_of(fd: int) -> tuple[int, int, int] | None:
    try:
        found = os.fstat(fd)
    except OSError:
        return None
    return found.st_dev, found.st_ino, found.st_mode


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return file.read()
    except OSError:
        return ""


def spawn_state() -> SpawnState:
    """What a process started now by the calling thread would inherit (see the module
    docstring); compare two with ``==``."""
    try:
        here = os.stat(".")
        cwd: tuple[int, int] | None = (here.st_dev, here.st_ino)
    except OSError:
        cwd = None
    status = tuple(
        line
        for line in _read("/proc/thread-self/status").splitlines()
        if line.partition(":")[0] in _STATUS_KEYS
    )
    return (
        cwd,
        tuple(_file_of(fd) for fd in (0, 1, 2)),
        status,
        tuple(resource.getrlimit(limit) for limit in _LIMITS),
        os.getpriority(os.PRIO_PROCESS, 0),
        _read("/proc/self/oom_score_adj"),
        dict(os.environ),
    )
