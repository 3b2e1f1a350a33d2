"""A process-tree workload's leader: started early through :mod:`.launcher`, then given its plan.

The launcher starts first, in a session of its own (so a terminal's Ctrl-C reaches only
accelkit, which forwards it), and waits for its plan: its pid names the workload (``pid:<n>``)
before anything is booked. :meth:`ProcessTree.launch` sends the plan (the command, its
environment, the cgroups to join before it execs). What contains the tree once it runs is the
process runtime's business (:mod:`accelkit.runtime.process`); without cgroups the leader's
process group is all this module can signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from accelkit.errors import WorkloadError
from accelkit.runtime import launcher
from accelkit.runtime.process_stamp import ProcessStamp
from accelkit.runtime.render.process import ProcessPlan

__all__ = [
    "CommandNotRunnable",
    "LauncherProcess",
    "ProcessTree",
    "exit_status",
    "start_launcher",
]


LAUNCHER = str(Path(launcher.__file__))


def launcher_code(source: str = LAUNCHER) -> str:
    """The launcher's bytecode where it is cached and fresh for its source (the launcher's
    interpreter then compiles nothing: 3 ms of every workload's launcher), else its source.

    Fresh as the import system judges a timestamp-based ``.pyc``: this interpreter's magic
    number, and the source's modification time and size.
    """
    try:
        cached = importlib.util.cache_from_source(source)
        with open(cached, "rb") as file:
            header = file.read(16)
        info = os.stat(source)
    except (OSError, NotImplementedError, ValueError):
        return source
    fresh = (
        importlib.util.MAGIC_NUMBER,
        (0).to_bytes(4, "little"),  # flags: timestamp-based
        (int(info.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little"),
        (info.st_size & 0xFFFFFFFF).to_bytes(4, "little"),
    )
    return cached if header == b"".join(fresh) else source


def start_launcher(*args: str | int, contain: bool) -> subprocess.Popen[bytes]:
    """``launcher.py`` with ``args``, the ``int`` ones descriptors it is given, from its
    bytecode where that is fresh, in a session of its own (so a terminal's Ctrl-C reaches only
    accelkit); ``contain``: its plan will ask for containment."""
    words = [str(arg) for arg in args] + (["contain"] if contain else [])
    return subprocess.Popen(  # noqa: S603 - our own launcher, no shell
        [sys.executable, "-I", "-S", launcher_code(), *words],
        pass_fds=tuple(arg for arg in args if isinstance(arg, int)),
        start_new_session=True,
    )


def exit_status(returncode: int) -> int:
    """A shell-style status: the exit code, or 128 + N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class CommandNotRunnable(WorkloadError):
    """The launcher could not start the command: ``status`` is 127 (not found), 126 (found but
    not runnable) or 125 (the launcher itself failed: cgroups, containment, terminal)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _launch_failure(report: bytes) -> CommandNotRunnable:
    """The launcher's ``<status> <stage>: <error>`` as an exception."""
    text = report.decode(errors="replace")
    code, sep, message = text.partition(" ")
    if sep and code.isdigit() and int(code) in launcher.FAILURE_STATUSES:
        return CommandNotRunnable(message, int(code))
    return CommandNotRunnable(text, launcher.EXIT_FAILED)


class LauncherProcess(Protocol):
    """A launcher as this process's child: a ``Popen``, or one the fork server cloned."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...

    def kill(self) -> None: ...


class ProcessTree:
    """One workload's launcher, then its command."""

    def __init__(self, process: LauncherProcess, plan_fd: int, status_fd: int) -> None:
        self.process = process
        self._exited: asyncio.Future[int] | None = None
        self._plan_fd: int | None = plan_fd
        self._status_fd: int | None = status_fd
        #: held while the plan pipe is written or closed (a setup is sent from another thread)
        self._plan_lock = threading.Lock()
        #: the launcher was sent its setup (:meth:`prepare`): the plan carries no cgroup
        self._prepared = False
        stamp = ProcessStamp.of(process.pid)
        if stamp is None:  # it cannot have exited: it waits for our plan
            msg = f"the launcher (pid {process.pid}) vanished before receiving its plan"
            raise WorkloadError(msg)
        self.leader = stamp

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    async def start(cls, *, contain: bool = False) -> ProcessTree:
        """Start the launcher; it waits until :meth:`launch` or :meth:`abort` (``contain``: its
        plan will ask for containment, whose module it then imports while it waits)."""
        return cls.spawn(contain=contain)

    @classmethod
    def spawn(cls, *, contain: bool = False) -> ProcessTree:
        """:meth:`start`, callable from any thread (it waits until the launcher execs)."""
        plan_r, plan_w = os.pipe()
        status_r, status_w = os.pipe()
        try:
            # a plain Popen, waited for through a pidfd (:meth:`wait`): asyncio's subprocesses
            # start a watcher thread per child, which costs more than the fork itself
            process = start_launcher(plan_r, status_w, contain=contain)
        except BaseException:
            for fd in (plan_r, plan_w, status_r, status_w):
                os.close(fd)
            raise
        os.close(plan_r)
        os.close(status_w)
        return cls(process, plan_w, status_r)

    def prepare(self, cgroup_procs: Sequence[str] = (), *, contain: bool = False) -> None:
        """Have the launcher join the cgroups of ``cgroup_procs`` and (``contain``) contain
        itself now, while it waits for its plan; then :meth:`launch` sends only what runs.

        Callable from any thread, before :meth:`launch`; a failure is the launcher's to report,
        when the plan is sent. A launcher that was aborted, or had its plan, is sent nothing.
        """
        body = launcher.encode_setup(cgroup_procs, contain=contain)
        with self._plan_lock:
            if self._plan_fd is None or self._prepared:
                return
            self._prepared = True
            with contextlib.suppress(BrokenPipeError):  # gone: its status says why at launch
                _write_all(self._plan_fd, body)

    def launch(
        self,
        argv: Sequence[str],
        plan: ProcessPlan,
        cgroup_procs: Sequence[str] = (),
        *,
        terminal: str = "",
        contain: bool = False,
    ) -> None:
        """Send the plan; return once ``argv`` runs, raise :class:`CommandNotRunnable` (or
        :class:`WorkloadError` for a plan that cannot be sent) if it cannot.

        The launcher joins the cgroup of each of ``cgroup_procs`` (a ``cgroup.procs`` or a v1
        ``tasks`` file) before it execs; ``terminal`` (``<fds>:<path>``) and ``contain`` are
        the launcher's (:mod:`accelkit.runtime.launcher`).
        """
        if self._prepared:  # joined and contained already
            cgroup_procs, contain = (), False
        program = argv[0] if argv else ""
        if argv and "/" not in program:  # searched for here: the launcher then only execs
            program = shutil.which(program, path=plan.env.get("PATH", os.defpath)) or program
        try:
            body = launcher.encode_plan(
                argv,
                plan.env,
                plan.cpu_affinity,
                cgroup_procs,
                program,
                terminal=terminal,
                contain=contain,
            )
        except ValueError as exc:
            msg = f"cannot start the workload: {exc}"
            raise WorkloadError(msg) from None
        self._send(body)
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
            raise _launch_failure(b"".join(chunks))

    def abort(self) -> None:
        """Make a launcher that has no plan yet exit without running anything; else a no-op."""
        self._send(b"")
        status_fd, self._status_fd = self._status_fd, None
        if status_fd is not None:
            with contextlib.suppress(OSError):
                os.close(status_fd)

    def _send(self, data: bytes) -> None:
        with self._plan_lock:
            fd, self._plan_fd = self._plan_fd, None
        if fd is None:
            return
        try:
            _write_all(fd, data)
        except BrokenPipeError:
            pass  # the launcher is gone; its exit status tells the rest
        finally:
            os.close(fd)

    @property
    def returncode(self) -> int | None:
        """The leader's shell-style exit status once it has been reaped, else ``None``."""
        code = self.process.returncode
        return None if code is None else exit_status(code)

    async def wait(self) -> int:
        """Wait for the leader; its shell-style exit status. Any number may wait at once."""
        if self.process.returncode is not None:
            return exit_status(self.process.returncode)
        if self._exited is None:
            self._exited = asyncio.ensure_future(self._reap())
        return exit_status(await asyncio.shield(self._exited))

    async def _reap(self) -> int:
        loop = asyncio.get_running_loop()
        try:
            pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # no pidfd (old kernel): a thread waits instead
            return await loop.run_in_executor(None, self.process.wait)
        try:
            readable: asyncio.Future[None] = loop.create_future()

            def exited() -> None:
                if not readable.done():
                    readable.set_result(None)

            loop.add_reader(pidfd, exited)
            try:
                await readable  # the pidfd is readable once the process has exited
            finally:
                loop.remove_reader(pidfd)
        finally:
            os.close(pidfd)
        return self.process.wait()  # reaps it at once: it has exited

    def signal_group(self, signum: int) -> None:
        """Signal the leader's process group (what is left of the tree without cgroups)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
