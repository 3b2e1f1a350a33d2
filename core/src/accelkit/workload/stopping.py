"""Stopping what runs a workload from another process: its accelkit process, or its leader.

``accelkit release`` uses these when the workload's runtime cannot be asked: the accelkit
process that runs a workload is asked (SIGTERM) to end it and tear it down, with a note saying
who released it (:mod:`.release_notes`), so that the run says so; a workload that outlived its
accelkit process and has no runtime handle is ended by its leader's process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal

from accelkit.calls import call_async
from accelkit.runtime.base import Runtime, WorkloadHandle
from accelkit.runtime.process_stamp import ProcessStamp
from accelkit.workload.ledger import Ledger
from accelkit.workload.record import LedgerRecord
from accelkit.workload.release_notes import drop_release_note, note_release

__all__ = ["OWNER_TEARDOWN_WAIT_S", "end_process", "runtime_stop", "stop_owner"]

#: how long ``release`` waits, beyond the grace period, for an owner process to tear down
OWNER_TEARDOWN_WAIT_S = 30.0


async def stop_owner(record: LedgerRecord, ledger: Ledger, grace: float, *, force: bool) -> bool:
    """SIGTERM the accelkit process that runs the workload and wait for its record to go.

    ``True`` when the owner removed the record; with ``force``, an owner that does not is
    killed (``False``: the teardown is left to the caller).
    """
    owner = record.owner
    assert owner is not None
    note_release(
        ledger.state_dir, owner, f"accelkit release (pid {os.getpid()}, uid {os.getuid()})"
    )
    try:
        os.kill(owner.pid, signal.SIGTERM)
    except ProcessLookupError:
        drop_release_note(ledger.state_dir, owner)
        return ledger.read(*record.key) is None
    deadline = time.monotonic() + grace + OWNER_TEARDOWN_WAIT_S
    while time.monotonic() < deadline:
        if ledger.read(*record.key) is None:
            break
        if not owner.is_running():
            break
        await asyncio.sleep(0.05)
    if ledger.read(*record.key) is None:
        # the owner takes its note before it removes the record: one left was not wanted (its
        # workload had ended on its own)
        drop_release_note(ledger.state_dir, owner)
        return True
    if force and owner.is_running():
        with contextlib.suppress(ProcessLookupError):
            os.kill(owner.pid, signal.SIGKILL)
        while owner.is_running():
            await asyncio.sleep(0.02)
    if not owner.is_running():
        drop_release_note(ledger.state_dir, owner)
    return False


async def end_process(pid: int, grace: float) -> None:
    """SIGTERM a workload's leader (its process group when it leads one), SIGKILL after grace."""

    def send(signum: int) -> bool:
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signum)
            else:
                os.kill(pid, signum)
        except ProcessLookupError:
            return False
        return True

    if not send(signal.SIGTERM):
        return
    stamp = ProcessStamp.of(pid)
    deadline = time.monotonic() + grace
    while stamp is not None and stamp.is_running() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if stamp is not None and stamp.is_running():
        send(signal.SIGKILL)


def runtime_stop(
    handle: WorkloadHandle | None,
    runtimes: Mapping[str, Runtime],
    grace: float,
    call_timeout: Decimal,
) -> Callable[[], Awaitable[None]] | None:
    """What ends and removes a workload in its runtime; ``None`` without a handle or runtime.

    A container record without a handle (accelkit killed between the create and recording it)
    is stopped by its name, the workload id: the container may exist, created or started, and
    nothing else would ever remove it (the reconciler's ``handle_of`` gives that handle).
    """
    runtime = runtimes.get(handle.runtime) if handle is not None else None
    if handle is None or runtime is None:
        return None
    limit = Decimal(str(grace)) + call_timeout

    async def stop() -> None:
        await call_async(runtime.name, "stop", limit, lambda: runtime.stop(handle, grace))

    return stop
