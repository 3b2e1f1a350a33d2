"""What ``accelkit run`` does with the signals it gets, and with Ctrl-C typed at a terminal.

Without a terminal (DESIGN §14): SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every
process of the workload once it runs; ``grace`` seconds later whatever is left gets SIGKILL, and a
second SIGINT or SIGTERM kills at once. Before the command runs the first signal cancels the run.

With a terminal (DESIGN §18, :mod:`accelkit.workload.terminal`): Ctrl-C reaches the workload's
foreground job through its own terminal, and nothing more happens; a second interrupt within
``grace`` seconds of the previous one sends SIGTERM to every process of the workload (and SIGKILL
``grace`` seconds later), a third SIGKILL. A SIGINT sent to accelkit counts as a typed Ctrl-C
(the first is passed to the terminal's foreground job). Each escalation is said on stderr, and so
is a SIGKILL at the end of the grace period.

Once :attr:`SignalRelay.protected` is set (the teardown has begun) a signal never cancels
anything: it is forwarded to the workload if one runs, else ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from accelkit.runtime.base import Runtime, WorkloadHandle

if TYPE_CHECKING:  # imported by a run at a terminal only
    from accelkit.workload.terminal import Terminal

__all__ = ["FORWARDED_SIGNALS", "SignalRelay"]

#: the signals ``accelkit run`` passes on to the whole workload
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_KILL_AT_ONCE = (signal.SIGINT, signal.SIGTERM)


def _name(signum: int) -> str:
    return signal.Signals(signum).name


class SignalRelay:
    """Forwards signals to the running workload, SIGKILL after the grace; before, cancels once."""

    def __init__(
        self,
        task: asyncio.Task[int],
        grace: float,
        echo: Callable[[str], None] = lambda _line: None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.task = task
        self.grace = grace
        self.echo = echo
        self.target: tuple[Runtime, WorkloadHandle] | None = None
        #: the workload's terminal, when it has one: interrupts escalate instead
        self.terminal: Terminal | None = None
        self.received: int | None = None
        self.forwarded: int | None = None
        self.protected = False
        #: whether accelkit killed the workload (grace over, repeated interrupts)
        self.killed = False
        self._timer: asyncio.TimerHandle | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self._interrupts = 0
        self._last_interrupt: float | None = None

    def __enter__(self) -> SignalRelay:
        _ROUTES.add(self)
        return self

    def __exit__(self, *_exc: object) -> None:
        _ROUTES.discard(self)
        if self._timer is not None:
            self._timer.cancel()

    def running(self, runtime: Runtime, handle: WorkloadHandle) -> None:
        """The workload runs: signals are forwarded to it from now on.

        A signal that came before it ran cancelled the run; where that cancellation was lost
        (Python 3.11's ``asyncio.wait_for`` returns a result that arrived with the cancellation
        instead of raising it) the workload would run on regardless: the signal is forwarded
        now, as if it had come a moment later.
        """
        self.target = (runtime, handle)
        if self.received is not None and self.forwarded is None:
            self._forward(self.received)

    def deliver(self, signum: int) -> None:
        """Called from the signal handler: act on ``signum`` in the relay's event loop."""
        with contextlib.suppress(RuntimeError):  # its loop closed: the run is over
            self.loop.call_soon_threadsafe(self._on_signal, signum)

    def _on_signal(self, signum: int) -> None:
        if self.target is not None:
            if self.terminal is not None and signum == signal.SIGINT:
                self.interrupt(typed=False)
            else:
                self._forward(signum)
            return
        if self.protected or self.received is not None:
            return  # the run is already being torn down
        self.received = signum
        self.task.cancel()

    def interrupt(self, *, typed: bool = True) -> None:
        """A Ctrl-C for a workload with a terminal: see the module docstring."""
        now = self.loop.time()
        last, self._last_interrupt = self._last_interrupt, now
        within = last is not None and now - last <= self.grace
        self._interrupts = self._interrupts + 1 if within else 1
        if self._interrupts == 1:
            if not typed and self.terminal is not None:  # as if typed: to the foreground job
                group = self.terminal.foreground_group()
                if group is not None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(group, signal.SIGINT)
            return
        if self._interrupts == 2:
            self.echo(
                f"second interrupt within {self.grace:g} s: SIGTERM to every process of the "
                "workload (a third kills it)"
            )
            self._send(signal.SIGTERM)
            self._kill_later(signal.SIGTERM)
            return
        self.echo("third interrupt: SIGKILL to every process of the workload")
        self.killed = True
        self._send(signal.SIGKILL)

    def _forward(self, signum: int) -> None:
        if self.forwarded is not None and signum in _KILL_AT_ONCE:
            self.echo(f"second {_name(signum)}: SIGKILL to every process of the workload")
            self.killed = True
            self._send(signal.SIGKILL)  # a second Ctrl-C: no more waiting
            return
        self.forwarded = signum
        self._send(signum)
        self._kill_later(signum)

    def _kill_later(self, signum: int) -> None:
        if self._timer is None:
            self._timer = self.loop.call_later(self.grace, self._grace_over, signum)

    def _grace_over(self, signum: int) -> None:
        if self.target is None:
            return
        runtime, handle = self.target

        async def kill() -> None:
            if await runtime.is_alive(handle) is False:
                return
            self.echo(
                f"the workload did not end within --grace {self.grace:g} s of "
                f"{_name(signum)}: SIGKILL to every process of it"
            )
            self.killed = True
            await runtime.signal(handle, signal.SIGKILL)

        self._track(self.loop.create_task(kill()))

    def _send(self, signum: int) -> None:
        if self.target is None:
            return
        runtime, handle = self.target
        self._track(self.loop.create_task(runtime.signal(handle, signum)))

    def _track(self, send: asyncio.Task[None]) -> None:
        self._sends.add(send)
        send.add_done_callback(self._sends.discard)


class _SignalRoutes:
    """The process's handlers of :data:`FORWARDED_SIGNALS`, while any run is under way.

    Installed when the first run begins and the previous handlers put back when the last one
    ends, so concurrent runs of one process each get every signal. ``signal.signal`` directly,
    not the loop's ``add_signal_handler``: that one checks the number against the set of valid
    signals on every call, which cost a millisecond of every run. Only the main thread can catch
    signals; a run in another thread simply has none forwarded.
    """

    def __init__(self) -> None:
        self.relays: set[SignalRelay] = set()
        self.previous: dict[int, Any] = {}

    def add(self, relay: SignalRelay) -> None:
        if not self.previous and threading.current_thread() is threading.main_thread():
            for signum in FORWARDED_SIGNALS:
                self.previous[signum] = signal.signal(signum, self._handle)
                signal.siginterrupt(signum, False)  # as the loop's handlers: calls restart
        self.relays.add(relay)

    def discard(self, relay: SignalRelay) -> None:
        self.relays.discard(relay)
        if not self.relays and threading.current_thread() is threading.main_thread():
            for signum, handler in self.previous.items():
                # None: the handler was not set from Python; the default is what remains
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)
            self.previous.clear()

    def _handle(self, signum: int, _frame: object) -> None:
        for relay in list(self.relays):
            relay.deliver(signum)


_ROUTES = _SignalRoutes()
