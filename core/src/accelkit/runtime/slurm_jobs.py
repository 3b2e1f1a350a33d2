"""The slurm-jobs runtime: jobs that Slurm runs with devices the Slurm bridge's prolog booked.

accelkit never starts these jobs; it asks Slurm whether they still run (``scontrol show job -o
ID``, the ``JobState``). A job Slurm no longer knows, or in a final state, is gone; a Slurm that
cannot be asked is ``None`` (cannot tell), so every accelkit process keeps the booking instead of
freeing devices a job may still use. Stopping a job is ``scancel``. The handle records the
``scontrol`` to run and the ``SLURM_CONF`` the prolog saw, so any process asks the same cluster.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
from collections.abc import Sequence
from typing import ClassVar

from accelkit.runtime.base import RuntimeUnavailable, TrackingRuntime, WorkloadHandle
from accelkit.types import WorkloadType

__all__ = ["FINAL_STATES", "SlurmJobsRuntime", "job_state", "run_slurm", "slurm_handle"]

log = logging.getLogger(__name__)

#: seconds ``scontrol`` or ``scancel`` may take before Slurm counts as unreachable
COMMAND_TIMEOUT = 10.0
#: job states after which a job holds nothing (COMPLETING still runs its epilog)
FINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
_STATE = re.compile(r"\bJobState=([A-Z_]+)")
_UNKNOWN_JOB = "invalid job id"


def slurm_handle(job_id: str, scontrol: str, slurm_conf: str | None) -> WorkloadHandle:
    """The handle of a booking made for Slurm job ``job_id``."""
    details = {"job": job_id, "scontrol": scontrol}
    if slurm_conf:
        details["slurm-conf"] = slurm_conf
    return WorkloadHandle(SlurmJobsRuntime.name, job_id, details)


async def run_slurm(argv: Sequence[str], slurm_conf: str | None) -> tuple[int, str]:
    """Run a Slurm command; its exit status and its stdout and stderr together."""
    env = dict(os.environ)
    if slurm_conf:
        env["SLURM_CONF"] = slurm_conf
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), COMMAND_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(errors="replace")


async def job_state(job_id: str, scontrol: str = "scontrol", slurm_conf: str | None = None) -> str:
    """The job's ``JobState`` (``""`` when Slurm does not know the job any more).

    Raises ``OSError`` or ``TimeoutError`` when Slurm cannot be asked, ``RuntimeError`` when it
    answers something else.
    """
    code, text = await run_slurm([scontrol, "show", "job", "-o", job_id], slurm_conf)
    if code != 0:
        if _UNKNOWN_JOB in text.lower():
            return ""
        msg = f"{scontrol} show job {job_id} failed ({code}): {text.strip()}"
        raise RuntimeError(msg)
    found = _STATE.search(text)
    if found is None:
        msg = f"{scontrol} show job {job_id} gave no JobState: {text.strip()[:200]}"
        raise RuntimeError(msg)
    return found.group(1)


class SlurmJobsRuntime(TrackingRuntime):
    """Answers for bookings the Slurm bridge made; runs nothing itself.

    ``ended`` names jobs known to be over whatever Slurm says (the epilog of a job runs while
    Slurm still calls it COMPLETING).
    """

    name: ClassVar[str] = "slurm-jobs"
    tracks: ClassVar[str] = "jobs Slurm runs"
    workload_type: ClassVar[WorkloadType] = WorkloadType.PROCESS_TREE

    def __init__(self, ended: frozenset[str] = frozenset()) -> None:
        self.ended = ended

    async def signal(self, handle: WorkloadHandle, signum: int) -> None:
        await self._scancel(handle, ["--signal", signal.Signals(signum).name.removeprefix("SIG")])

    async def stop(self, handle: WorkloadHandle, grace: float) -> None:
        """Cancel the job through ``scancel`` (Slurm sends SIGTERM, then SIGKILL after its
        ``KillWait``); a job already over is left alone."""
        if await self.is_alive(handle) is False:
            return
        await self._scancel(handle, [])

    async def _scancel(self, handle: WorkloadHandle, options: list[str]) -> None:
        scontrol = handle.details.get("scontrol", "scontrol")
        scancel = os.path.join(os.path.dirname(scontrol), "scancel")
        try:
            code, text = await run_slurm(
                [scancel, *options, handle.ident], handle.details.get("slurm-conf")
            )
        except (OSError, TimeoutError) as exc:
            msg = f"cannot cancel Slurm job {handle.ident}: {exc}"
            raise RuntimeUnavailable(msg) from None
        if code != 0:
            msg = f"scancel {handle.ident} failed ({code}): {text.strip()}"
            raise RuntimeUnavailable(msg)

    async def is_alive(self, handle: WorkloadHandle) -> bool | None:
        """Whether Slurm still runs the job; ``None`` when Slurm cannot be asked."""
        if handle.ident in self.ended:
            return False
        try:
            state = await job_state(
                handle.ident,
                handle.details.get("scontrol", "scontrol"),
                handle.details.get("slurm-conf"),
            )
        except (OSError, TimeoutError, RuntimeError) as exc:
            log.info("Slurm cannot be asked about job %s: %s", handle.ident, exc)
            return None
        return bool(state) and state not in FINAL_STATES

    def describe(self, handle: WorkloadHandle) -> list[str]:
        return [f"Slurm job {handle.ident}"]
