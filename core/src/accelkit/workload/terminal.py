"""A pseudo-terminal for a workload started from a terminal, relayed to accelkit's own.

As ``docker run -it`` and ``srun --pty`` do, ``accelkit run`` with a terminal on stdin (and in
its foreground) gives the workload a pseudo-terminal of its own: the launcher, the leader of a
new session, makes it its controlling terminal (:mod:`accelkit.runtime.launcher`), so job
control works (``bash -i``) and Ctrl-C reaches the workload's foreground job through the
terminal's line discipline, as it would without accelkit. accelkit's own terminal is put in raw
mode (output processing kept, so accelkit's messages still start on a new line) and restored at
the end; this module copies the bytes both ways, the window size on ``SIGWINCH``, and tells the
runner of every interrupt character typed while the workload's terminal turns it into
``SIGINT`` (:meth:`Terminal.start`'s ``on_interrupt``), so that a second and a third Ctrl-C can
end the whole workload.

The workload's stdin is always the pseudo-terminal; its stdout and stderr are where accelkit's
own are terminals, and are left as they are (a file, a pipe) otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import termios
from collections.abc import Callable
from typing import Any

__all__ = ["Terminal"]

_LFLAG, _OFLAG, _CC = 3, 1, 6


def _foreground(fd: int) -> bool:
    """Whether ``fd`` is a terminal whose foreground process group is this process's (a job put
    in the background would be stopped by the first change of the terminal's mode)."""
    try:
        return os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False


class Terminal:
    """One workload's pseudo-terminal and the relay between it and accelkit's terminal."""

    def __init__(self, master: int, slave: int, fds: str, out_fd: int) -> None:
        self.master = master
        self.slave = slave
        self.fds = fds
        self.out_fd = out_fd
        self._saved: list[Any] | None = None
        self._pending = b""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_interrupt: Callable[[], None] = lambda: None
        self._resize_installed = False

    @classmethod
    def open(cls, stdin: int = 0) -> Terminal | None:
        """A pseudo-terminal like ``stdin``'s, or ``None`` when ``stdin`` is no terminal or this
        process is not in its foreground."""
        if not _foreground(stdin):
            return None
        master, slave = os.openpty()
        try:
            termios.tcsetattr(slave, termios.TCSANOW, termios.tcgetattr(stdin))
            with contextlib.suppress(OSError):
                termios.tcsetwinsize(slave, termios.tcgetwinsize(stdin))
        except BaseException:
            os.close(master)
            os.close(slave)
            raise
        fds = "0" + "".join(str(fd) for fd in (1, 2) if os.isatty(fd))
        out_fd = 1 if os.isatty(1) or not os.isatty(2) else 2
        return cls(master, slave, fds, out_fd)

    @property
    def spec(self) -> str:
        """``<fds>:<path>``, as the launcher's plan carries it."""
        return f"{self.fds}:{os.ttyname(self.slave)}"

    def start(self, on_interrupt: Callable[[], None], stdin: int = 0) -> None:
        """Put accelkit's terminal in raw mode and relay until :meth:`close`."""
        self._loop = asyncio.get_running_loop()
        self._on_interrupt = on_interrupt
        saved = termios.tcgetattr(stdin)
        raw = termios.tcgetattr(stdin)
        raw[0] &= ~(termios.BRKINT | termios.ICRNL | termios.INPCK | termios.ISTRIP | termios.IXON)
        raw[2] = (raw[2] & ~(termios.CSIZE | termios.PARENB)) | termios.CS8
        raw[_LFLAG] &= ~(termios.ECHO | termios.ICANON | termios.IEXTEN | termios.ISIG)
        raw[_CC][termios.VMIN], raw[_CC][termios.VTIME] = 1, 0
        termios.tcsetattr(stdin, termios.TCSAFLUSH, raw)
        self._saved = saved
        os.set_blocking(self.master, False)
        self._loop.add_reader(stdin, self._input, stdin)
        self._loop.add_reader(self.master, self._output)
        with contextlib.suppress(ValueError, RuntimeError):  # not the main thread
            self._loop.add_signal_handler(signal.SIGWINCH, self._resize, stdin)
            self._resize_installed = True

    def foreground_group(self) -> int | None:
        """The workload terminal's foreground process group, if any."""
        try:
            return os.tcgetpgrp(self.master)
        except OSError:
            return None

    def _resize(self, stdin: int) -> None:
        with contextlib.suppress(OSError):
            termios.tcsetwinsize(self.master, termios.tcgetwinsize(stdin))

    def _interrupts_in(self, data: bytes) -> int:
        try:
            attributes = termios.tcgetattr(self.master)
        except termios.error:
            return 0
        if not attributes[_LFLAG] & termios.ISIG:
            return 0  # the workload reads its keys raw (an editor): ^C is a key like others
        intr = attributes[_CC][termios.VINTR]
        return data.count(intr) if isinstance(intr, bytes) and intr != b"\0" else 0

    def _input(self, stdin: int) -> None:
        assert self._loop is not None
        try:
            data = os.read(stdin, 4096)
        except OSError:
            data = b""
        if not data:  # accelkit's terminal is gone: the workload sees no more input
            self._loop.remove_reader(stdin)
            return
        self._write_master(data)
        for _ in range(self._interrupts_in(data)):
            self._on_interrupt()

    def _write_master(self, data: bytes) -> None:
        assert self._loop is not None
        queued = bool(self._pending)
        self._pending += data
        if not queued:
            self._flush_master()

    def _flush_master(self) -> None:
        assert self._loop is not None
        try:
            while self._pending:
                self._pending = self._pending[os.write(self.master, self._pending) :]
        except BlockingIOError:
            self._loop.add_writer(self.master, self._flush_master)
            return
        except OSError:
            self._pending = b""  # the workload's terminal is gone
        self._loop.remove_writer(self.master)

    def _output(self) -> None:
        if not self._copy_output() and self._loop is not None:
            self._loop.remove_reader(self.master)

    def _copy_output(self) -> bool:
        """Copy what the workload wrote; ``False`` once its terminal is closed."""
        while True:
            try:
                data = os.read(self.master, 65536)
            except BlockingIOError:
                return True
            except OSError as exc:
                if exc.errno == errno.EIO:  # no process holds the terminal any more
                    return False
                raise
            if not data:
                return False
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(self.out_fd, view) :]
                except BlockingIOError:
                    continue
                except OSError:
                    return True  # accelkit's own output is gone: drop the rest

    def close(self, stdin: int = 0) -> None:
        """Copy what is left of the workload's output, restore accelkit's terminal, close."""
        loop, self._loop = self._loop, None
        if loop is not None and self.master >= 0:
            for fd in (stdin, self.master):
                loop.remove_reader(fd)
            loop.remove_writer(self.master)
            if self._resize_installed:
                loop.remove_signal_handler(signal.SIGWINCH)
            os.set_blocking(self.master, False)
            with contextlib.suppress(OSError):
                self._copy_output()
        if self._saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(stdin, termios.TCSADRAIN, self._saved)
            self._saved = None
        for fd in (self.master, self.slave):
            if fd >= 0:  # closed once only: a second close could hit a reused number
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.master = self.slave = -1
