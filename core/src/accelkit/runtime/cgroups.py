"""The cgroups of one process-tree workload: signalled, frozen, emptied and removed.

Every workload gets ``accelkit/<agent>/<workload>`` (names sanitised) under the cgroup the
invoking process is in, in each hierarchy:

* **cgroup v1 / hybrid**: one group per controller (memory, cpuset, pids, freezer, devices).
  cpuset children start empty in v1, so each level copies its parent's ``cpuset.cpus`` and
  ``cpuset.mems`` unless the workload has its own. ``devices.deny`` gets one ``c MAJ:MIN rwm``
  rule per accelerator device node the workload was not granted.
* **cgroup v2**: one leaf. Controllers are enabled level by level in ``cgroup.subtree_control``;
  a cgroup with processes cannot do that (the no-internal-process rule), so the invoking process
  first moves itself into the leaf ``accelkit-supervisor`` next to the ``accelkit`` subtree.
  Device isolation needs the container runtime there (an eBPF program, not a file).

A controller that cannot be used is listed in :attr:`WorkloadCgroups.missing` with the reason;
what the runtime does about it (refuse, or run with less) is its decision.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import attrs

from accelkit.cgroup import CgroupDir, CgroupFormatError
from accelkit.errors import WorkloadError
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.runtime.base import RuntimeUnavailable

__all__ = [
    "KILL_TIMEOUT",
    "SUPERVISOR_LEAF",
    "V1_CONTROLLERS",
    "V2_CONTROLLERS",
    "CgroupSetupError",
    "WorkloadCgroups",
    "safe_name",
    "stop_cgroups",
    "workload_cgroup_path",
    "write_control",
]

V1_CONTROLLERS = ("memory", "cpuset", "pids", "freezer", "devices")
V2_CONTROLLERS = ("memory", "cpuset", "pids")
#: the v2 leaf accelkit moves itself into before enabling controllers for its children
SUPERVISOR_LEAF = "accelkit-supervisor"
#: how long to wait for a freezer to report the group frozen before going on without it
FREEZE_TIMEOUT = 1.0
V2_DEVICES_NOTE = "device isolation on cgroup v2 needs the container runtime (--runtime docker)"

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class CgroupSetupError(RuntimeUnavailable):
    """A workload's cgroups could not be made as required."""


def safe_name(name: str) -> str:
    cleaned = _UNSAFE.sub("-", name).strip(".") or "-"
    return cleaned[:200]


def workload_cgroup_path(agent: str, workload: str) -> str:
    """The workload's cgroup, relative to the invoking process's own (on cgroup v2 to its parent
    where the process's group has other processes): ``accelkit/<a>/<w>``."""
    return f"accelkit/{safe_name(agent)}/{safe_name(workload)}"


def write_control(path: Path, value: str) -> None:
    with open(path, "w") as file:
        file.write(value)


def _read_pids(path: Path) -> set[int]:
    try:
        text = path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return set()
    except OSError as exc:
        if exc.errno == errno.ENODEV:  # removed while open
            return set()
        raise
    return {int(p) for p in text.split()}


@attrs.frozen(repr=False)
class WorkloadCgroups:
    """The cgroups made for one workload; rebuilt from a handle's details by a later process.

    ``dirs`` maps each controller in use to its directory (on v2, the one leaf; the key
    ``"unified"`` names the v2 leaf even without controllers); ``missing`` maps each controller
    that is not in use to the reason.
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    version: int
    relative: str
    dirs: Mapping[str, Path] = attrs.field(factory=dict)
    missing: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def directories(self) -> tuple[Path, ...]:
        """Each directory once (v1 controllers mounted together share one)."""
        return tuple(dict.fromkeys(self.dirs.values()))

    def procs_files(self) -> tuple[str, ...]:
        """The groups' ``cgroup.procs`` files: writing a pid there moves that process."""
        return tuple(str(d / "cgroup.procs") for d in self.directories)

    def self_join_files(self) -> tuple[str, ...]:
        """The files a single-threaded leader joins the groups through, writing ``0``.

        On v1 the ``tasks`` files: the kernel moves the writing thread without the lock
        that every move of a whole process takes, whose first use after a pause waits out an
        RCU grace period (10-15 ms here). The leader has one thread, so that is all of it.
        On v2 none: a leaf's ``cgroup.threads`` takes no thread of a domain group, so the
        leader is moved through ``cgroup.procs`` by the runtime instead.
        """
        if self.version != 1:
            return ()
        return tuple(str(d / "tasks") for d in self.directories)

    def pids(self) -> set[int]:
        """Every process in any of the groups (zombies are not listed by the kernel)."""
        found: set[int] = set()
        for directory in self.directories:
            found |= _read_pids(directory / "cgroup.procs")
        return found

    def populated(self) -> bool:
        """Whether any process is in the groups, those still exiting included.

        On cgroup v2 ``cgroup.procs`` stops listing a process as soon as it starts to exit, but
        an exiting process still holds what it opened: a CUDA program's GPU memory is freed
        while its device files close, which can take seconds. The leaf's ``cgroup.events``
        says ``populated 0`` only once every process is gone, and only then can it be removed.
        On v1 ``cgroup.procs`` lists a process until it is gone.
        """
        leaf = self.dirs.get("unified")
        if self.version == 2 and leaf is not None:
            with contextlib.suppress(OSError, CgroupFormatError):
                events = CgroupDir(leaf, 2, leaf).read_keyed("cgroup.events")
                if events is not None:
                    return events.get("populated", 0) != 0
        return bool(self.pids())

    def exists(self) -> bool:
        """Whether any of the groups is still there."""
        return any(d.is_dir() for d in self.directories)

    def signal(self, signum: int) -> None:
        """Send ``signum`` to every process, frozen meanwhile so that none forks away."""
        with self.frozen():
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)

    def kill(self) -> None:
        """SIGKILL everything (``cgroup.kill`` where the kernel has it)."""
        leaf = self.dirs.get("unified")
        if leaf is not None and (leaf / "cgroup.kill").exists():
            with contextlib.suppress(OSError):  # gone already (ENOENT, ENODEV)
                write_control(leaf / "cgroup.kill", "1")
            return
        self.signal(signal.SIGKILL)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Freeze the groups for the ``with`` block (a no-op without a freezer)."""
        thaw = self._freeze()
        try:
            yield
        finally:
            thaw()

    def _freeze(self) -> Callable[[], None]:
        freezer = self.dirs.get("freezer")
        if self.version == 1 and freezer is not None:
            state = freezer / "freezer.state"
            return _freeze_file(state, "FROZEN", "THAWED", lambda: state.read_text().strip())
        leaf = self.dirs.get("unified")
        if self.version == 2 and leaf is not None and (leaf / "cgroup.freeze").exists():
            events = leaf / "cgroup.events"
            return _freeze_file(leaf / "cgroup.freeze", "1", "0", lambda: _frozen_event(events))
        return _no_thaw

    def oom_kills(self) -> int:
        """How many processes the kernel killed for exceeding the memory limit."""
        memory = self.dirs.get("memory")
        if memory is None:
            return 0
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        directory = CgroupDir(memory, self.version, memory)
        with contextlib.suppress(OSError, ValueError):
            values = directory.read_keyed(name) or {}
            return values.get("oom_kill", 0)
        return 0

    def remove(self, *, levels: bool = True) -> None:
        """Remove the (empty) groups, then (``levels``) the ``accelkit/<agent>`` levels
        nothing else uses."""
        for directory in self.directories:
            with contextlib.suppress(FileNotFoundError):
                directory.rmdir()
        if levels:
            self.remove_levels()

    def remove_levels(self) -> None:
        """Remove the ``accelkit/<agent>`` levels above the groups that nothing uses."""
        for directory in self.directories:
            for parent in (directory.parent, directory.parent.parent):
                try:
                    parent.rmdir()
                except OSError:
                    break  # another workload's group is still there (or it is gone)

    def to_details(self) -> dict[str, str]:
        """Plain strings for :class:`~accelkit.runtime.base.WorkloadHandle` details."""
        details = {f"cgroup.{name}": str(path) for name, path in self.dirs.items()}
        details["cgroup_version"] = str(self.version)
        if self.missing:
            details["missing"] = "; ".join(f"{k}: {v}" for k, v in self.missing.items())
        return details

    @classmethod
    def from_details(cls, relative: str, details: Mapping[str, str]) -> WorkloadCgroups:
        """The inverse of :meth:`to_details` (``ValueError`` on a malformed version)."""
        dirs = {
            key.removeprefix("cgroup."): Path(value)
            for key, value in details.items()
            if key.startswith("cgroup.")
        }
        return cls(int(details.get("cgroup_version", "0")), relative, dirs)


def _no_thaw() -> None:
    return None


def _frozen_event(events: Path) -> str:
    with contextlib.suppress(OSError):
        for line in events.read_text().splitlines():
            if line.startswith("frozen "):
                return "1" if line.split()[1] == "1" else "0"
    return "0"


def _freeze_file(
    path: Path, frozen: str, thawed: str, read_state: Callable[[], str]
) -> Callable[[], None]:
    try:
        write_control(path, frozen)
    except OSError:
        return _no_thaw  # the group is gone (or has no freezer): nothing to thaw
    deadline = time.monotonic() + FREEZE_TIMEOUT
    with contextlib.suppress(OSError):
        while read_state() != frozen and time.monotonic() < deadline:
            time.sleep(0.001)

    def thaw() -> None:
        with contextlib.suppress(OSError):
            write_control(path, thawed)

    return thaw


#: how long :func:`stop_cgroups` keeps killing before it gives up on unkillable processes
KILL_TIMEOUT = 30.0


def _wait_empty(cgroups: WorkloadCgroups, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while cgroups.populated():
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    return True


def stop_cgroups(cgroups: WorkloadCgroups, grace: float, *, levels: bool = True) -> None:
    """End every process of the groups (``SIGTERM``, ``SIGKILL`` after ``grace`` seconds,
    again until they are gone, for at most :data:`KILL_TIMEOUT`) and remove them (``levels``:
    with the ``accelkit/<agent>`` levels nothing else uses); ``WorkloadError`` if they will
    not end."""
    if cgroups.populated():
        if grace > 0:
            cgroups.signal(signal.SIGTERM)
        deadline = time.monotonic() + KILL_TIMEOUT
        if not (grace > 0 and _wait_empty(cgroups, grace)):
            while True:
                cgroups.kill()
                if _wait_empty(cgroups, 0.1):
                    break
                if time.monotonic() >= deadline:
                    left = sorted(cgroups.pids())
                    msg = (
                        f"processes {left} of cgroup {cgroups.relative} do not die"
                        if left
                        else f"the processes of cgroup {cgroups.relative} have not finished "
                        f"exiting after {KILL_TIMEOUT:g} s"
                    )
                    raise WorkloadError(msg)
    cgroups.remove(levels=levels)
