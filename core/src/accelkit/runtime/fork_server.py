"""The launchers' fork server: one interpreter, started once, that clones each spare launcher.

Starting a launcher is starting an interpreter: about 6 ms of CPU, 9 with the module that
containment calls the kernel through, for every workload, on the cores the workloads and the
node share. The fork server (``launcher.py serve``, :func:`accelkit.runtime.launcher.serve`) is
one such interpreter with that module imported; for each launcher it clones itself with
``CLONE_PARENT``, so the clone is this process's child, exactly as a launcher started directly:
it is waited for and reaped, and its exit status read, the same way (:class:`ClonedLauncher`),
and it runs the launcher's code from where a started launcher begins (its own session, its plan
awaited).

A clone inherits what the server had when it started: the server's :attr:`ForkServer.state`
is what this process's :func:`~accelkit.runtime.spawn_state.spawn_state` was then, which the
spare launcher compares as it compares its own. The server ends when its socket closes:
:meth:`ForkServer.close`, or this process's death (the clones, waiting for a plan, see their
plan pipes close and exit, as a started launcher does). Where ``clone``'s number is not known
(another architecture), launchers are started directly; so are they after the server failed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess

from accelkit.runtime import launcher
from accelkit.runtime.process_tree import ProcessTree, start_launcher
from accelkit.runtime.spawn_state import SpawnState, spawn_state

__all__ = ["ClonedLauncher", "ForkServer"]

#: the longest reply: a pid or ``-errno``, and the newline
_REPLY = 32


class ClonedLauncher:
    """A launcher the fork server cloned: this process's child, seen as a ``Popen`` is."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        #: as ``Popen``'s: the exit code, ``-N`` for death by signal N, ``None`` while it runs
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code once it has exited (reaping it), else ``None``."""
        if self.returncode is None:
            self._reaped(os.WNOHANG)
        return self.returncode

    def wait(self) -> int:
        """Wait for it to exit and reap it; its exit code."""
        while self.returncode is None:
            self._reaped(0)
        return self.returncode

    def kill(self) -> None:
        """``SIGKILL`` it, unless it was reaped (its pid may be another process's then)."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def _reaped(self, options: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, options)
        except ChildProcessError:  # reaped elsewhere: its status is lost, as Popen says then
            self.returncode = 0
            return
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)


class ForkServer:
    """One fork server; see the module docstring. Used by one thread at a time."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        sock: socket.socket,
        state: SpawnState,
        contain: bool,
    ) -> None:
        self.process = process
        self._sock = sock
        #: what every clone inherits, as :func:`spawn_state` said when the server started
        self.state = state
        #: whether the clones import the containment module ahead (see the launcher's ``main``)
        self.contain = contain

    @classmethod
    def start(cls, *, contain: bool) -> ForkServer | None:
        """Start a server (from the thread whose :func:`spawn_state` its clones get); ``None``
        where launchers cannot be cloned here or the server cannot start."""
        if launcher.CLONE_SYSCALLS.get(os.uname().machine) is None:
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        state = spawn_state()
        try:
            process = start_launcher("serve", theirs.fileno(), contain=contain)
        except OSError:
            ours.close()
            return None
        finally:
            theirs.close()
        if spawn_state() != state:  # changed meanwhile: which did the server get? never used
            state = (None,)
        return cls(process, ours, state, contain)

    def spawn(self) -> ProcessTree:
        """A launcher cloned by the server, waiting for its plan (``OSError`` when the server
        cannot clone one or is gone: start one directly then)."""
        plan_r, plan_w = os.pipe()
        status_r, status_w = os.pipe()
        try:
            socket.send_fds(self._sock, [b"L"], [plan_r, status_w])
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = self._sock.recv(_REPLY)
                if not chunk:
                    raise ConnectionResetError(0, "the launchers' fork server is gone")
                reply += chunk
            pid = int(reply)
            if pid <= 0:
                raise OSError(-pid, f"the fork server cannot clone: {os.strerror(-pid)}")
        except (OSError, ValueError) as exc:
            for fd in (plan_w, status_r):
                os.close(fd)
            if isinstance(exc, ValueError):
                msg = f"the launchers' fork server answered {reply!r}"
                raise OSError(msg) from None
            raise
        finally:
            os.close(plan_r)  # the clone has its own (the server received copies)
            os.close(status_w)
        return ProcessTree(ClonedLauncher(pid), plan_w, status_r)

    def close(self) -> None:
        """End the server and reap it (its clones are this process's own children)."""
        self._sock.close()
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()
