"""Making one workload's cgroups under the invoking process's own (cgroup v1, hybrid and v2).

:func:`make_cgroups` reads ``/proc/self/cgroup`` and ``mountinfo`` (through
:class:`accelkit.cgroup.CgroupFS`), makes ``accelkit/<agent>/<workload>`` in each hierarchy it
may write and writes the limits (on cgroup v2, beside this process's group when that group holds
other processes: :func:`_parent_of_workloads`). What it cannot do is recorded in
:attr:`~accelkit.runtime.cgroups.WorkloadCgroups.missing`; only a device rule that cannot be
written fails the whole setup, since the workload would then reach devices it was not given.
"""

from __future__ import annotations

import contextlib
import errno
from pathlib import Path

import attrs

from accelkit.cgroup import CgroupDir, CgroupFS
from accelkit.runtime.cgroup_limits import CgroupLimits, cpu_list
from accelkit.runtime.cgroups import (
    SUPERVISOR_LEAF,
    V1_CONTROLLERS,
    V2_CONTROLLERS,
    V2_DEVICES_NOTE,
    CgroupSetupError,
    WorkloadCgroups,
    write_control,
)
from accelkit.runtime.process_stamp import _proc_stat

__all__ = ["apply_limits", "create_cgroups", "make_cgroups", "sweep_stale"]


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def make_cgroups(fs: CgroupFS, relative: str, limits: CgroupLimits) -> WorkloadCgroups:
    """Make and limit ``relative`` under this process's cgroups; see the module docstring."""
    made = create_cgroups(fs, relative)
    try:
        return apply_limits(made, limits)
    except BaseException:
        made.remove()
        raise


def create_cgroups(fs: CgroupFS, relative: str) -> WorkloadCgroups:
    """Make ``relative`` under this process's cgroups, without limits (cpuset: the parent's).

    A process can join them at once and be limited later by :func:`apply_limits`: the process
    runtime moves its parked leader in while the hooks run, since a process's first move
    between cgroups waits out a kernel RCU grace period (about one scheduler tick).
    """
    if any(m.version == 1 and m.options & set(V1_CONTROLLERS) for m in fs.mounts):
        return _make_v1(fs, relative)
    if any(m.version == 2 for m in fs.mounts):
        return _make_v2(fs, relative)
    missing = dict.fromkeys(V1_CONTROLLERS, "no cgroup hierarchy is mounted")
    return WorkloadCgroups(0, relative, {}, missing)


def apply_limits(made: WorkloadCgroups, limits: CgroupLimits) -> WorkloadCgroups:
    """Write ``limits`` into groups made by :func:`create_cgroups`; the limits it could not
    write are added to ``missing`` (a device rule or a v2 limit raises ``CgroupSetupError``)."""
    missing = dict(made.missing)
    if made.version == 1:
        for controller, path in made.dirs.items():
            problem = _limit_v1(controller, path, limits)
            if problem:
                missing[controller] = problem
    elif made.version == 2 and "unified" in made.dirs:
        leaf = made.dirs["unified"]
        try:
            _limit_v2(leaf, [c for c in V2_CONTROLLERS if c in made.dirs], limits)
        except OSError as exc:
            msg = f"cannot set limits in {leaf}: {_why(exc)}"
            raise CgroupSetupError(msg) from None
    return attrs.evolve(made, missing=missing)


def sweep_stale(made: WorkloadCgroups) -> int:
    """Remove the empty sibling groups ``pid-<n>`` whose leader ``n`` is gone; how many.

    An accelkit process killed after making a workload's groups and before recording them in
    the ledger leaves them behind (empty: its launcher exits when its plan pipe closes). A group
    whose leader still runs may be another process's new workload; one with processes is a
    live workload: both stay.
    """
    removed = 0
    for directory in made.directories:
        with contextlib.suppress(OSError):
            for entry in directory.parent.iterdir():
                number = entry.name.removeprefix("pid-")
                if entry == directory or entry.name == number or not number.isdigit():
                    continue
                if _running(int(number)) or not entry.is_dir():
                    continue
                with contextlib.suppress(OSError):  # taken meanwhile, or not empty
                    if not (CgroupDir(entry, made.version, entry).read("cgroup.procs") or ""):
                        entry.rmdir()
                        removed += 1
    return removed


def _running(pid: int) -> bool:
    if (stat := _proc_stat(pid)) is not None:  # one read of /proc, psutil not imported
        return stat[0] not in (None, "Z")
    import psutil  # only where /proc cannot say

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # cannot tell: keep its group


#: what a v1 cpuset must have before a task can join it
_CPUSET_FILES = ("cpuset.cpus", "cpuset.mems")


def _leaf(base: Path, relative: str, *, cpuset: bool) -> Path:
    """Make ``base/relative`` (its missing levels too); an existing leaf must be empty."""
    path = base / relative
    try:
        path.mkdir()
    except FileNotFoundError:  # a level above is missing: made level by level
        return _levels(base, relative, cpuset=cpuset)
    except FileExistsError:
        _check_empty(path)
    if cpuset:
        parent = path.parent
        values = [(parent / name).read_text().strip() for name in _CPUSET_FILES]
        if not all(values):  # a level made a moment ago by another workload's setup
            _fill_cpusets(base, relative)
        else:
            for name, value in zip(_CPUSET_FILES, values, strict=True):
                write_control(path / name, value)
    return path


def _levels(base: Path, relative: str, *, cpuset: bool) -> Path:
    path = base
    for part in relative.split("/"):
        path = path / part
        with contextlib.suppress(FileExistsError):
            path.mkdir()
    _check_empty(path)
    if cpuset:
        _fill_cpusets(base, relative)
    return path


def _fill_cpusets(base: Path, relative: str) -> None:
    """Give each level of a v1 cpuset its parent's CPUs and memory nodes where it has none.

    v1 cpuset children start with no CPUs and no memory nodes, and so does a level that
    another workload's setup made a moment ago and has not filled in yet: a task joining a
    cpuset without CPUs fails (``ENOSPC``).
    """
    path = base
    for part in relative.split("/"):
        parent, path = path, path / part
        for name in _CPUSET_FILES:
            if not (path / name).read_text().strip():
                write_control(path / name, (parent / name).read_text().strip())


def _check_empty(path: Path) -> None:
    procs = path / "cgroup.procs"
    if procs.exists() and procs.read_text().split():
        msg = f"cgroup {path} already exists and has processes: another workload uses it"
        raise CgroupSetupError(msg)


def _make_v1(fs: CgroupFS, relative: str) -> WorkloadCgroups:
    dirs: dict[str, Path] = {}
    missing: dict[str, str] = {}
    made = WorkloadCgroups(1, relative, dirs, missing)
    memberships = fs.memberships()
    try:
        for controller in V1_CONTROLLERS:
            own = fs.process_directory(controller, memberships=memberships)
            if own is None or own.version != 1:
                missing[controller] = "no cgroup v1 hierarchy has this controller"
                continue
            try:
                dirs[controller] = _leaf(own.path, relative, cpuset=controller == "cpuset")
            except OSError as exc:
                missing[controller] = f"cannot create a cgroup under {own.path}: {_why(exc)}"
    except BaseException:
        made.remove()
        raise
    return made


def _limit_v1(controller: str, path: Path, limits: CgroupLimits) -> str:
    """Write one v1 controller's limits; the problem, or ``""``."""
    try:
        if controller == "memory" and limits.memory is not None:
            write_control(path / "memory.limit_in_bytes", str(limits.memory))
            swap = path / "memory.memsw.limit_in_bytes"
            if swap.exists():  # memory + swap: no swap beyond the limit
                write_control(swap, str(limits.memory))
        elif controller == "cpuset":
            if limits.cpus is not None:
                write_control(path / "cpuset.cpus", cpu_list(limits.cpus))
            if limits.mems is not None:
                write_control(path / "cpuset.mems", cpu_list(limits.mems))
        elif controller == "pids" and limits.pids_max is not None:
            write_control(path / "pids.max", str(limits.pids_max))
    except OSError as exc:
        return f"cannot set the {controller} limit in {path}: {_why(exc)}"
    if controller == "devices":
        for rule in limits.denied_devices:
            try:
                write_control(path / "devices.deny", rule.deny_line())
            except OSError as exc:
                msg = f"cannot deny device {rule.path} in {path}: {_why(exc)}"
                raise CgroupSetupError(msg) from None
    return ""


def _v2_base(fs: CgroupFS) -> CgroupDir | None:
    own = fs.process_directory("memory")
    if own is None or own.version != 2:
        return None
    if own.path.name == SUPERVISOR_LEAF:  # accelkit moved itself here earlier
        return CgroupDir(own.path.parent, 2, own.top)
    return own


def _subtree(path: Path) -> set[str]:
    return set((CgroupDir(path, 2, path).read("cgroup.subtree_control") or "").split())


def _enable(path: Path, controllers: list[str]) -> None:
    present = _subtree(path)
    wanted = [c for c in controllers if c not in present]
    if wanted:
        write_control(path / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))


def _make_v2(fs: CgroupFS, relative: str) -> WorkloadCgroups:
    base = _v2_base(fs)
    if base is None:
        missing = dict.fromkeys(V2_CONTROLLERS, "this process is in no cgroup v2 group")
        return WorkloadCgroups(2, relative, {}, missing)
    offered = set((base.read("cgroup.controllers") or "").split())
    controllers = [c for c in V2_CONTROLLERS if c in offered]
    missing = {
        c: f"controller not delegated to {base.path}" for c in V2_CONTROLLERS if c not in offered
    }
    missing["devices"] = V2_DEVICES_NOTE
    where = base.path
    try:
        if controllers:
            where = _parent_of_workloads(base, controllers)
        leaf = _leaf(where, relative, cpuset=False)
        level = where
        for part in relative.split("/")[:-1]:
            level = level / part
            if controllers:
                _enable(level, controllers)
    except _NoPlace as exc:
        return _without_groups(relative, str(exc))
    except OSError as exc:
        why = f"cannot create a cgroup v2 group under {where}: {_why(exc)}"
        if exc.errno in (errno.EACCES, errno.EPERM):
            why += " (run accelkit as root, or in a cgroup delegated to its user)"
        return _without_groups(relative, why)
    return WorkloadCgroups(
        2, relative, {"unified": leaf, **dict.fromkeys(controllers, leaf)}, missing
    )


def _without_groups(relative: str, why: str) -> WorkloadCgroups:
    """No group, as on v1 where none can be made: every controller missing, saying ``why``.

    The leader's process group then contains the workload, and a run that needs a memory limit
    is refused (unless ``--no-memory-limit``), with ``why`` in its message.
    """
    missing = {**dict.fromkeys(V2_CONTROLLERS, why), "devices": V2_DEVICES_NOTE}
    return WorkloadCgroups(2, relative, {}, missing)


class _NoPlace(Exception):
    """No group can have children with controllers: why (see :func:`_parent_of_workloads`)."""


def _parent_of_workloads(base: CgroupDir, controllers: list[str]) -> Path:
    """The group to make ``accelkit/...`` in: ``base`` with ``controllers`` enabled for its
    children, this process (and the launchers it started) moved out of it first (cgroup v2's
    no-internal-process rule): a scope or service delegated to accelkit.

    A base that holds other processes too (the shell's group of a container or a VM without
    systemd, a login session) cannot enable them: the workloads then go under its parent, which
    hands those controllers down already (they are in the base's ``cgroup.controllers``), so
    ``accelkit/`` is a sibling of the base. A base at the top of the hierarchy (a cgroup
    namespace's root) has no parent to use: :class:`_NoPlace` then says how to delegate.
    """
    path = base.path
    if all(c in _subtree(path) for c in controllers):
        return path
    inside = set((base.read("cgroup.procs") or "").split())
    if inside and inside <= _this_process_and_its_children():
        supervisor = path / SUPERVISOR_LEAF
        supervisor.mkdir(exist_ok=True)
        for pid in sorted(inside):  # a launcher moves on into its workload's group
            write_control(supervisor / "cgroup.procs", pid)
    try:
        _enable(path, controllers)
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            raise
        if path != base.top:
            return path.parent
        msg = (
            f"cgroup {path} has other processes, so no controller can be enabled for its "
            "children (cgroup v2's no-internal-process rule), and it is the top of the "
            "hierarchy this process sees: run accelkit in a cgroup of its own with delegation "
            "(systemd-run --scope -p Delegate=yes ...)"
        )
        raise _NoPlace(msg) from None
    return path


def _this_process_and_its_children() -> set[str]:
    """This process's pid and its descendants' (a workload's launcher is started before its
    groups are made, in this process's group), as ``cgroup.procs`` writes them."""
    import psutil  # cgroup v2 only: a v1 run never needs it

    me = psutil.Process()
    try:
        children = me.children(recursive=True)
    except psutil.Error:
        children = []
    return {str(me.pid), *(str(child.pid) for child in children)}


def _limit_v2(leaf: Path, controllers: list[str], limits: CgroupLimits) -> None:
    if "memory" in controllers and limits.memory is not None:
        write_control(leaf / "memory.max", str(limits.memory))
        if (leaf / "memory.swap.max").exists():
            write_control(leaf / "memory.swap.max", "0")
    if "cpuset" in controllers:
        if limits.cpus is not None:
            write_control(leaf / "cpuset.cpus", cpu_list(limits.cpus))
        if limits.mems is not None:
            write_control(leaf / "cpuset.mems", cpu_list(limits.mems))
    if "pids" in controllers and limits.pids_max is not None:
        write_control(leaf / "pids.max", str(limits.pids_max))
