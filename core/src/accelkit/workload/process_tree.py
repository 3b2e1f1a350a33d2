"""Starting, signalling and ending a local process tree through :mod:`.launcher`.

The launcher starts first, in a session of its own (so a terminal's Ctrl-C reaches only
accelkit, which forwards it), and waits for its plan: its pid is the workload's leader pid before
any hook runs, and the id of the workload's session and process group. On Linux this process
becomes a child subreaper, so descendants orphaned by the leader stay under it and
:meth:`ProcessTree.end` can find them. Only the workload's own processes are ended: those still in
its session or process group, and their descendants. Other children of this process (other
workloads, a plugin's helper processes) are left alone; so is a workload process that started a
session of its own and was orphaned, since nothing tells it apart from them any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import psutil

from accelkit.errors import WorkloadError
from accelkit.workload import launcher
from accelkit.workload.liveness import ProcessStamp
from accelkit.workload.memlimit import LimitMethod, MemoryLimit
from accelkit.workload.render.process import ProcessPlan

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``); ``False`` elsewhere."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def exit_status(returncode: int) -> int:
    """A shell-style status: the exit code, or 128 + N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class ProcessTree:
    """One workload's launcher, then its command, then whatever the command started."""

    def __init__(self, process: asyncio.subprocess.Process, plan_fd: int, status_fd: int) -> None:
        self.process = process
        self._plan_fd: int | None = plan_fd
        self._status_fd: int | None = status_fd
        stamp = ProcessStamp.of(process.pid)
        if stamp is None:  # it cannot have exited: it waits for our plan
            msg = f"the launcher (pid {process.pid}) vanished before receiving its plan"
            raise WorkloadError(msg)
        self.leader = stamp

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    async def start(cls) -> ProcessTree:
        """Start the launcher; it waits until :meth:`launch` or :meth:`abort`."""
        plan_r, plan_w = os.pipe()
        status_r, status_w = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-S",
                str(Path(launcher.__file__)),
                str(plan_r),
                str(status_w),
                pass_fds=(plan_r, status_w),
                start_new_session=True,
            )
        except BaseException:
            for fd in (plan_r, plan_w, status_r, status_w):
                os.close(fd)
            raise
        os.close(plan_r)
        os.close(status_w)
        return cls(process, plan_w, status_r)

    def launch(self, argv: Sequence[str], plan: ProcessPlan, memory: MemoryLimit) -> None:
        """Send the plan; return once ``argv`` runs, raise :class:`WorkloadError` if it cannot."""
        cgroup = memory.cgroup_dir
        body = {
            "argv": list(argv),
            "env": dict(plan.env),
            "cpu_affinity": None if plan.cpu_affinity is None else list(plan.cpu_affinity),
            "rlimit_as": memory.limit if memory.method is LimitMethod.RLIMIT else None,
            "cgroup_procs": str(cgroup / "cgroup.procs") if cgroup is not None else None,
        }
        self._send(json.dumps(body).encode())
        status_fd, self._status_fd = self._status_fd, None
        if status_fd is None:
            msg = "the workload's launcher was already given its plan"
            raise WorkloadError(msg)
        chunks = []
        try:
            while chunk := os.read(status_fd, 65536):
                chunks.append(chunk)
        finally:
            os.close(status_fd)
        if chunks:
            msg = b"".join(chunks).decode(errors="replace")
            raise WorkloadError(msg)

    def abort(self) -> None:
        """Make a launcher that has no plan yet exit without running anything; else a no-op."""
        self._send(b"")
        status_fd, self._status_fd = self._status_fd, None
        if status_fd is not None:
            with contextlib.suppress(OSError):
                os.close(status_fd)

    def _send(self, data: bytes) -> None:
        fd, self._plan_fd = self._plan_fd, None
        if fd is None:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except BrokenPipeError:
            pass  # the launcher is gone; its exit status tells the rest
        finally:
            os.close(fd)

    async def wait(self) -> int:
        """Wait for the leader; its shell-style exit status."""
        return exit_status(await self.process.wait())

    def signal(self, signum: int) -> None:
        """Forward a signal to the leader's process group (the tree, unless it left it)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    async def end(self, grace: float = 5.0) -> None:
        """End the leader if it still runs, then every process left in the tree.

        Each gets SIGTERM, and SIGKILL when it outlives ``grace`` seconds.
        """
        if self.process.returncode is None:
            self.signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), grace)
            except TimeoutError:
                self.signal(signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()
        await asyncio.get_running_loop().run_in_executor(None, self._end_rest, grace)

    def _end_rest(self, grace: float) -> None:
        # the leader is reaped by now; what is left are its descendants, adopted by us
        procs = self.members()
        self.signal(signal.SIGTERM)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _gone, alive = psutil.wait_procs(procs, timeout=grace)
        self.signal(signal.SIGKILL)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=grace)

    def members(self) -> list[psutil.Process]:
        """This workload's processes among our descendants, the leader aside.

        Those in the leader's session or process group, and everything they started; never
        another child of ours, such as another workload or a plugin's helper process.
        """
        found: dict[int, psutil.Process] = {}
        for proc in _descendants(psutil.Process()):
            if proc.pid in found or proc.pid == self.pid or not self._owns(proc.pid):
                continue
            found[proc.pid] = proc
            for child in _descendants(proc):
                found.setdefault(child.pid, child)
        return list(found.values())

    def _owns(self, pid: int) -> bool:
        try:
            return os.getsid(pid) == self.pid or os.getpgid(pid) == self.pid
        except OSError:  # gone meanwhile
            return False


def _descendants(proc: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return proc.children(recursive=True)
    return []
