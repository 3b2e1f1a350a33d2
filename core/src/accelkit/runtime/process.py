"""The ``process`` runtime: a local process tree in cgroups of its own (DESIGN §14).

:meth:`ProcessRuntime.new_workload` parks a launcher process (its pid names the workload
``pid:<n>``) and, while the booking and the hooks run, makes the workload's cgroups
(:mod:`accelkit.runtime.cgroup_setup`) and has the launcher join them and contain itself (its
setup, :func:`~accelkit.runtime.launcher.encode_setup`); :meth:`~ProcessRuntime.create` writes
the memory limit, cpuset, pids limit and the device nodes the workload may not open;
:meth:`~ProcessRuntime.start` sends the launcher its plan, and it execs. So nothing of the
user's runs outside its cgroups. On v1 the launcher joins them itself, one thread through each
``tasks`` file, which spares the kernel's lock for moving whole processes: its first use after
a pause waits out an RCU grace period (10-15 ms). On v2 the runtime moves the launcher while
the hooks run, so that the wait overlaps them. From its second workload on the runtime keeps a
launcher ready for the next, taken only where a fresh one would inherit the same
(:mod:`.spare`).

Liveness is "the cgroup has processes": a leader that exited while a child (or a ``setsid``
daemon) runs leaves the workload alive, and :meth:`~ProcessRuntime.stop` ends every process of
the cgroup, frozen while it is signalled so that nothing forks away. A later process finds all
of it through the handle alone. Where no cgroup can be made the runtime says what is missing
(:attr:`~accelkit.runtime.base.WorkloadHandle.details` ``missing``), falls back to the leader's
process group, and refuses a memory limit it cannot enforce.

Where accelkit has ``CAP_SYS_ADMIN`` (as root), the workload cannot leave its cgroups even as
root: the launcher gives it a mount namespace whose cgroup file systems are read-only and drops
``CAP_SYS_ADMIN`` and ``CAP_SYS_PTRACE`` from its bounding set (see
:mod:`accelkit.runtime.launcher`). A root accelkit without ``CAP_SYS_ADMIN`` cannot do that,
and says so in ``missing``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import attrs

from accelkit.cgroup import CgroupFS
from accelkit.errors import WorkloadError
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.runtime.base import LaunchSpec, Runtime, RuntimeUnavailable, WorkloadHandle
from accelkit.runtime.cgroup_limits import CgroupLimits, deny_rules
from accelkit.runtime.cgroup_setup import apply_limits, create_cgroups, sweep_stale
from accelkit.runtime.cgroups import (
    KILL_TIMEOUT,
    WorkloadCgroups,
    stop_cgroups,
    workload_cgroup_path,
    write_control,
)
from accelkit.runtime.process_stamp import ProcessStamp
from accelkit.runtime.process_tree import ProcessTree
from accelkit.runtime.render.process import ProcessPlan, render_process
from accelkit.runtime.spare import SpareLauncher
from accelkit.sizes import format_binary_size
from accelkit.types import AgentId, MountType, Workload, WorkloadType

__all__ = ["KILL_TIMEOUT", "ProcessRuntime"]

_CAP_SYS_ADMIN = 21
_NO_CONTAINMENT = (
    "a root workload can move itself out of its cgroups: accelkit lacks CAP_SYS_ADMIN to make "
    "the cgroup file systems read-only for it"
)
_T = TypeVar("_T")


@attrs.frozen(repr=False)
class _Parked:
    """A launcher waiting for its plan, and its move into the workload's new cgroups."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    tree: ProcessTree
    placing: asyncio.Future[WorkloadCgroups]


@attrs.define(repr=False)
class _Pending:
    """A created workload of this process: its launcher, the plan it will get, its cgroups."""

    __repr__ = attrs_repr

    tree: ProcessTree
    argv: tuple[str, ...]
    plan: ProcessPlan
    cgroups: WorkloadCgroups
    terminal: str = ""
    contain: bool = False
    #: forgotten once stopped and no :meth:`ProcessRuntime.wait` waits for the leader's status
    stopped: bool = False
    waiting: int = 0


class ProcessRuntime(Runtime):
    """Process trees in cgroups of their own; see the module docstring."""

    name = "process"
    workload_type = WorkloadType.PROCESS_TREE

    def __init__(self, *, root: Path | str = "/", pids_max: int | None = None) -> None:
        self.root = Path(root)
        self.pids_max = pids_max
        self._parked: dict[str, _Parked] = {}
        self._created: dict[str, _Pending] = {}
        self._made = 0
        #: groups whose ``accelkit/<agent>`` levels :meth:`close` removes (see :meth:`stop`)
        self._levels: dict[tuple[str, ...], WorkloadCgroups] = {}
        #: from the second workload on, a launcher kept ready for the next (:mod:`.spare`)
        self._spare = SpareLauncher()
        #: whether workloads are contained (read-only cgroups, capabilities dropped)
        self.contain = _has_capability(_CAP_SYS_ADMIN)

    async def new_workload(self, agent_id: AgentId) -> Workload:
        """Park a launcher (the workload is ``pid:<launcher pid>``) and, meanwhile, make its
        cgroups and move it in: the move takes a kernel grace period, which then overlaps the
        booking and the hooks instead of delaying the start."""
        tree = await self._spare.take(contain=self.contain)
        if tree is None:
            tree = await ProcessTree.start(contain=self.contain)
        self._made += 1
        if self._made >= 2:  # a process that runs one workload (accelkit run) keeps none
            self._spare.keep(contain=self.contain)
        workload = Workload.process_tree(f"pid:{tree.pid}")
        relative = workload_cgroup_path(agent_id, workload.id)
        placing = asyncio.ensure_future(_in_thread(lambda: self._place(relative, tree)))
        self._parked[workload.id] = _Parked(tree, placing)
        return workload

    def _place(self, relative: str, tree: ProcessTree) -> WorkloadCgroups:
        """Make the groups and have the leader join them (it does on v1) and contain itself,
        while the booking and the hooks run."""
        made = create_cgroups(CgroupFS.read(self.root), relative)
        if not made.self_join_files():
            try:
                for procs in made.procs_files():
                    write_control(Path(procs), str(tree.pid))
            except OSError as exc:
                made.remove()
                msg = f"cannot move the workload's leader into its cgroups: {exc.strerror or exc}"
                raise RuntimeUnavailable(msg) from None
        tree.prepare(made.self_join_files(), contain=self.contain)
        sweep_stale(made)  # groups of runs killed before they recorded them
        return made

    async def create(self, spec: LaunchSpec) -> WorkloadHandle:
        """Limit the cgroups; ``RuntimeUnavailable`` when the memory limit cannot be kept."""
        parked = self._parked.get(spec.workload.id)
        if parked is None:
            msg = f"workload {spec.workload.id!r} was not made by this process runtime"
            raise RuntimeUnavailable(msg)
        plan = render_process(spec.config, spec.base_env)
        granted = [m.source for m in spec.config.mounts if m.type is MountType.DEVICE]
        granted += [m.target for m in spec.config.mounts if m.type is MountType.DEVICE]
        limits = CgroupLimits(
            memory=plan.memory_limit,
            cpus=spec.config.cpuset_cpus,
            mems=spec.config.cpuset_mems,
            pids_max=self.pids_max if spec.pids_max is None else spec.pids_max,
            denied_devices=deny_rules(spec.node_device_nodes, granted),
        )
        placed = await asyncio.shield(parked.placing)
        if placed.version == 1:  # a few writes of control files: less than a thread's trip
            cgroups = apply_limits(placed, limits)
        else:
            cgroups = await _in_thread(lambda: apply_limits(placed, limits))
        why = cgroups.missing.get("memory")
        if plan.memory_limit is not None and why is not None and spec.memory_limit_required:
            size = format_binary_size(plan.memory_limit)
            msg = (
                f"cannot enforce the memory limit of {size}: no usable memory controller "
                f"({why}); pass --no-memory-limit to run without one"
            )
            raise RuntimeUnavailable(msg)  # discard() ends the launcher and removes the groups
        contain = self.contain
        if cgroups.dirs and not contain and os.geteuid() == 0:
            missing = {**cgroups.missing, "membership": _NO_CONTAINMENT}
            cgroups = attrs.evolve(cgroups, missing=missing)
        tree = parked.tree
        details = {
            **cgroups.to_details(),
            "leader_pid": str(tree.leader.pid),
            "leader_start": tree.leader.start_time,
        }
        if plan.memory_limit is not None and why is None:
            details["memory_limit"] = str(plan.memory_limit)
        if limits.pids_max is not None and "pids" in cgroups.dirs:
            details["pids_max"] = str(limits.pids_max)
        if contain:
            details["read_only_cgroups"] = "1"
        handle = WorkloadHandle(self.name, cgroups.relative, details)
        self._created[handle.ident] = _Pending(
            tree, spec.argv, plan, cgroups, spec.terminal, contain
        )
        del self._parked[spec.workload.id]
        return handle

    async def start(self, handle: WorkloadHandle) -> None:
        """Send the plan; the launcher, already in its cgroups, execs (``CommandNotRunnable``
        if not)."""
        pending = self._created.get(handle.ident)
        if pending is None:
            msg = f"workload {handle.ident!r} was not created by this process runtime"
            raise WorkloadError(msg)
        pending.tree.launch(
            pending.argv,
            pending.plan,
            pending.cgroups.self_join_files(),
            terminal=pending.terminal,
            contain=pending.contain,
        )

    async def wait(
        self,
        handle: WorkloadHandle,
        *,
        on_leftovers: Callable[[int, Sequence[int]], None] | None = None,
    ) -> int:
        """The leader's status once the cgroup is empty (0 for a workload adopted from another
        process, whose leader's status nobody can read any more).

        ``on_leftovers(status, pids)`` is called once if the leader exits while other processes
        of the cgroup still run: the wait goes on until they end.
        """
        pending = self._created.get(handle.ident)
        status = 0
        if pending is not None:
            pending.waiting += 1
            try:
                status = await pending.tree.wait()
            finally:
                pending.waiting -= 1
                self._forget(handle, pending)
        cgroups = _cgroups_of(handle, pending)
        if cgroups.dirs:
            left, populated = _left_behind(cgroups)  # a few small files: less than a thread's trip
            if left and pending is not None and on_leftovers is not None:
                on_leftovers(status, sorted(left))
            delay = 0.0005
            while populated:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)
                populated = cgroups.populated()
        elif pending is None:
            stamp = _leader(handle)
            while stamp is not None and stamp.is_running():
                await asyncio.sleep(0.05)
        return status

    async def signal(self, handle: WorkloadHandle, signum: int) -> None:
        """Send ``signum`` to every process of the cgroup (the leader's group without one)."""
        cgroups = _cgroups_of(handle)
        if cgroups.dirs:
            await _in_thread(lambda: cgroups.signal(signum))
            return
        pending = self._created.get(handle.ident)
        if pending is not None:
            pending.tree.signal_group(signum)

    async def stop(self, handle: WorkloadHandle, grace: float) -> None:
        """SIGTERM all, SIGKILL after ``grace``, wait until empty, remove the cgroups (from
        the second workload on, the ``accelkit/<agent>`` levels are left for the next, until
        :meth:`close`: making them again for each costs more than the workload's own)."""
        pending = self._created.get(handle.ident)
        cgroups = _cgroups_of(handle, pending)
        if pending is not None:
            pending.tree.abort()  # a launcher still waiting for its plan exits at once
        levels = self._made < 2
        if not levels:
            self._levels.setdefault(_levels_key(cgroups), cgroups)
        if cgroups.dirs:
            ended = pending is not None and pending.tree.returncode is not None
            if ended and not cgroups.populated():  # all gone already: nothing to wait for
                cgroups.remove(levels=levels)
            else:
                await _in_thread(lambda: stop_cgroups(cgroups, grace, levels=levels))
        elif pending is not None:
            await _stop_group(pending.tree, grace)
        if pending is not None:
            await pending.tree.wait()
            pending.stopped = True
            self._forget(handle, pending)

    @property
    def spare_launcher(self) -> int | None:
        """The pid of the launcher kept ready for the next workload, if any."""
        return self._spare.pid

    async def close(self) -> None:
        """End the spare launcher, if any, and remove the ``accelkit/<agent>`` levels left
        (those another workload's group is in stay)."""
        await self._spare.close()
        levels, self._levels = self._levels, {}
        for cgroups in levels.values():
            cgroups.remove_levels()

    def _forget(self, handle: WorkloadHandle, pending: _Pending) -> None:
        if pending.stopped and not pending.waiting:
            self._created.pop(handle.ident, None)

    async def discard(self, workload: Workload, handle: WorkloadHandle | None) -> None:
        """Make a parked launcher exit and remove what :meth:`new_workload` and
        :meth:`create` made."""
        parked = self._parked.pop(workload.id, None)
        if parked is not None:
            parked.tree.abort()
            await parked.tree.wait()
            with contextlib.suppress(RuntimeUnavailable, OSError):  # nothing was placed
                placed = await asyncio.shield(parked.placing)
                await _in_thread(lambda: stop_cgroups(placed, 0))
        if handle is not None:
            await self.stop(handle, 0)

    async def is_alive(self, handle: WorkloadHandle) -> bool | None:
        """Whether the cgroup has processes, exiting ones included (they may still hold a
        device); the leader stamp without cgroups."""
        cgroups = _cgroups_of(handle)
        if cgroups.dirs:
            return await _in_thread(cgroups.populated)
        stamp = _leader(handle)
        return None if stamp is None else stamp.is_running()

    def oom_kills(self, handle: WorkloadHandle) -> int:
        """How many of the workload's processes the kernel killed at the memory limit."""
        return _cgroups_of(handle, self._created.get(handle.ident)).oom_kills()

    async def exit_notes(self, handle: WorkloadHandle) -> list[str]:
        """What the OOM killer did to the workload, and only that: which processes it killed
        (named from the kernel log where it can be read), and whether the command itself was
        one of them or exited on its own (a child killed, the command exiting 0)."""
        kills = self.oom_kills(handle)  # one small control file: less than a thread's trip
        if not kills:
            return []
        limit = handle.details.get("memory_limit")
        where = f"its limit of {format_binary_size(int(limit))}" if limit else "no limit of its own"
        victims = await _in_thread(lambda: oom_victims(handle.ident))
        killed = f"{kills} process(es) of the workload"
        if victims:
            killed += " (" + ", ".join(f"pid {pid}: {name}" for pid, name in victims) + ")"
        pending = self._created.get(handle.ident)
        status = None if pending is None else pending.tree.returncode
        leader = handle.details.get("leader_pid", "")
        if any(str(pid) == leader for pid, _ in victims):
            itself = ", the command itself among them"
        elif status is not None and (victims or status != 128 + signal.SIGKILL):
            itself = f", not the command itself, which exited with status {status}"
        else:
            itself = ""
        return [f"out of memory at {where}: the kernel killed {killed}{itself}"]

    def describe(self, handle: WorkloadHandle) -> list[str]:
        """The cgroups in use, per controller, and what is not contained."""
        cgroups = _cgroups_of(handle)
        version = handle.details.get("cgroup_version", "0")
        if not cgroups.dirs:
            lines = [f"process runtime: no cgroup for {handle.ident}"]
        else:
            lines = [f"process runtime: cgroup v{version} {handle.ident}"]
            limit = handle.details.get("memory_limit")
            for name, path in sorted(cgroups.dirs.items()):
                note = ""
                if name == "memory" and limit:
                    note = f" (limit {format_binary_size(int(limit))})"
                if name == "pids" and handle.details.get("pids_max"):
                    note = f" (pids.max {handle.details['pids_max']})"
                lines.append(f"  {name}: {path}{note}")
            if handle.details.get("read_only_cgroups"):
                lines.append(
                    "  cgroup file systems read-only for the workload, without CAP_SYS_ADMIN "
                    "and CAP_SYS_PTRACE"
                )
        missing = handle.details.get("missing")
        if missing:
            lines += [f"  not contained: {item}" for item in missing.split("; ")]
        return lines


def oom_victims(relative: str, kmsg: str = "/dev/kmsg") -> list[tuple[int, str]]:
    """The processes of cgroup ``relative`` (``accelkit/<agent>/<workload>``) that the kernel
    log says the OOM killer killed: ``(pid, command)``; none where the log cannot be read."""
    found: list[tuple[int, str]] = []
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return found
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while read: go on with the next
                    continue
                break
            if not record:
                break
            _, _, text = record.decode(errors="replace").partition(";")
            if not text.startswith("oom-kill:"):
                continue
            fields = dict(
                item.partition("=")[::2]
                for item in text.strip().removeprefix("oom-kill:").split(",")
            )
            if (
                fields.get("task_memcg", "").endswith("/" + relative)
                and fields.get("pid", "").isdigit()
            ):
                found.append((int(fields["pid"]), fields.get("task", "?")))
    finally:
        os.close(fd)
    return found


def _has_capability(number: int) -> bool:
    """Whether this process has capability ``number`` in its effective set."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> number & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _cgroups_of(handle: WorkloadHandle, pending: _Pending | None = None) -> WorkloadCgroups:
    """The workload's groups: those this runtime made for it (``pending``), else read from
    its handle, as another process finds them."""
    if pending is not None:
        return pending.cgroups
    try:
        return WorkloadCgroups.from_details(handle.ident, handle.details)
    except ValueError:
        return WorkloadCgroups(0, handle.ident)


def _leader(handle: WorkloadHandle) -> ProcessStamp | None:
    try:
        return ProcessStamp(int(handle.details["leader_pid"]), handle.details["leader_start"])
    except (KeyError, ValueError):
        return None


async def _in_thread(call: Callable[[], _T]) -> _T:
    return await asyncio.get_running_loop().run_in_executor(None, call)


def _levels_key(cgroups: WorkloadCgroups) -> tuple[str, ...]:
    return tuple(str(directory.parent) for directory in cgroups.directories)


def _left_behind(cgroups: WorkloadCgroups) -> tuple[set[int], bool]:
    """The processes still in the groups, and whether they are populated (one read for both:
    on v1 a listed process is what populates them)."""
    left = cgroups.pids()
    return left, bool(left) if cgroups.version == 1 else cgroups.populated()


async def _stop_group(tree: ProcessTree, grace: float) -> None:
    if tree.returncode is not None:
        tree.signal_group(signal.SIGKILL)  # the leader is gone: end what is left of its group
        return
    tree.signal_group(signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(tree.wait()), grace)
    tree.signal_group(signal.SIGKILL)
