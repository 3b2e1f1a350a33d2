"""A workload's launcher forked from this process, not started as an interpreter of its own.

Started as ``python -I -S launcher.py`` a launcher cost a bare interpreter's start, compiling
the launcher and, for a contained workload, importing ``ctypes``: 12-13 ms of CPU for every
workload, which on a small node competed with the run itself for the cores. A fork of this
process already has all of that; :func:`fork_launcher` forks, and the child runs
:func:`accelkit.runtime.launcher.launch` (it waits for its plan, joins the workload's cgroups,
contains itself and execs), the same code the interpreter ran, with what it inherits made
what an interpreter started by ``subprocess`` would have had:

* a session of its own; no descriptor but the standard three and its two pipes (closed
  first, so the child never holds the ledger's or anything else's files);
* every signal this process handles back to its default action, and ``SIGPIPE`` and
  ``SIGXFSZ``, which Python ignores, too (as ``subprocess``'s ``restore_signals``): the
  workload gets the default actions, not the interpreter's. Signals stay blocked from before
  the fork until that is done, so none reaches this process's handlers (or the event loop's
  wake-up descriptor, which the child shares until it is cleared) through the child.

The child imports nothing and loads no library (:func:`~accelkit.runtime.launcher.
prepare_containment` loaded ``ctypes``' C library here first): another thread of this process
may have held an import's lock when it forked. It never returns into this process's code:
whatever happens, it execs or exits.
"""

from __future__ import annotations

import contextlib
import fcntl  # noqa: F401 - here for the child: attach_terminal finds it imported
import os
import resource
import signal
import warnings
from collections.abc import Iterable

from accelkit.runtime import launcher

__all__ = ["ForkedLauncher", "fork_launcher"]

#: the signals ignored here that the child puts back to their default action
_DEFAULT_ACTIONS = (signal.SIGPIPE, signal.SIGXFSZ)
#: every signal, as numbers (blocked around the fork)
_EVERY = frozenset(int(signum) for signum in signal.valid_signals())


class ForkedLauncher:
    """The forked child, as much of ``subprocess.Popen`` as a process tree uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code once the child has exited (reaped then), else ``None``."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else (as :meth:`wait`)
                self.returncode = 0
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        """Wait for the child and reap it; its exit code (``-N`` for death by signal N)."""
        while self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:  # reaped by someone else: its status is lost (0, as
                self.returncode = 0  # ``subprocess.Popen`` says then)
                break
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL, unless the child was reaped already (its pid may be another's)."""
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


def fork_launcher(plan_r: int, status_w: int, *, contain: bool = False) -> ForkedLauncher:
    """Fork a launcher reading its plan from ``plan_r`` and reporting on ``status_w`` (both
    close-on-exec); ``contain``: its plan will ask for containment."""
    if contain:
        launcher.prepare_containment()
    max_fd = max(os.sysconf("SC_OPEN_MAX"), resource.getrlimit(resource.RLIMIT_NOFILE)[1], 256)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _EVERY)
    try:
        with warnings.catch_warnings():  # 3.12+: "multi-threaded, fork() may deadlock": the
            warnings.simplefilter("ignore", DeprecationWarning)  # child takes no lock (above)
            pid = os.fork()
        if pid == 0:
            _child(plan_r, status_w, blocked, max_fd)  # never returns
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return ForkedLauncher(pid)


def _child(plan_r: int, status_w: int, blocked: Iterable[int], max_fd: int) -> None:
    status = launcher.EXIT_FAILED
    try:
        low, high = sorted((plan_r, status_w))
        for first, last in ((3, low), (low + 1, high), (high + 1, max_fd)):
            if first < last:
                os.closerange(first, last)
        os.setsid()
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)
        for signum in _EVERY:
            action = signal.getsignal(signum)
            if callable(action) or (signum in _DEFAULT_ACTIONS and action == signal.SIG_IGN):
                with contextlib.suppress(OSError, ValueError):
                    signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        launcher.launch(plan_r, status_w)
    except BaseException:  # noqa: S110 - the status says it: never back into the caller
        pass
    finally:
        os._exit(status)
