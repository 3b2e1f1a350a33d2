"""The slurm-jobs runtime: jobs that Slurm runs with devices the Slurm bridge's prolog booked.

accelkit never starts these jobs; it asks Slurm whether they still run (``scontrol show job -o
ID``, the ``JobState``). A job Slurm no longer knows, in a final state, or whose ``StartTime``
(or ``SLUID``) is not the booked job's (a job id used again) is gone; a Slurm that cannot be asked
is ``None`` (cannot tell), so every accelkit process keeps the booking instead of freeing devices
a job may still use. A job Slurm calls over whose processes still hold its device nodes, or still
live in its cgroup, counts as running: the booking outlives none of them (the epilog kills
them, :func:`job_processes`). Stopping a job is ``scancel``. The handle records the ``scontrol``
to run and the ``SLURM_CONF`` the prolog saw, so any process asks the same cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import attrs

from accelkit.runtime.base import RuntimeUnavailable, TrackingRuntime, WorkloadHandle
from accelkit.types import WorkloadType

__all__ = [
    "FINAL_STATES",
    "JobInfo",
    "SlurmJobsRuntime",
    "job_info",
    "job_processes",
    "job_state",
    "kill_processes",
    "run_slurm",
    "slurm_handle",
]

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
_START = re.compile(r"\bStartTime=(\S+)")
_SLUID = re.compile(r"\bSLUID=(\S+)")
_UNKNOWN_JOB = "invalid job id"
#: SLURM_SCRIPT_CONTEXT of the node's and the controller's Prolog and Epilog
_HOOKS = frozenset({b"prolog_slurmd", b"epilog_slurmd", b"prolog_slurmctld", b"epilog_slurmctld"})
#: Slurm's daemons: never counted among a job's processes
_DAEMONS = frozenset({b"slurmd", b"slurmstepd", b"slurmctld", b"slurmdbd"})
#: where proctrack/cgroup puts a job's processes (cgroup v1 freezer, v2 under slurmstepd.scope)
CGROUP_GLOBS = (
    "freezer/slurm*/uid_*/job_{job}",
    "system.slice/slurmstepd.scope/job_{job}",
    "slurmstepd.scope/job_{job}",
)


def slurm_handle(
    job_id: str,
    scontrol: str,
    slurm_conf: str | None,
    *,
    start: str = "",
    sluid: str = "",
    files: Sequence[str] = (),
) -> WorkloadHandle:
    """The handle of a booking made for Slurm job ``job_id`` (started at ``start``, Slurm's
    ``StartTime``, or known by ``sluid``), whose devices are the nodes ``files``."""
    details = {"job": job_id, "scontrol": scontrol}
    if slurm_conf:
        details["slurm-conf"] = slurm_conf
    if start:
        details["start"] = start
    if sluid:
        details["sluid"] = sluid
    if files:
        details["files"] = "\n".join(files)
    return WorkloadHandle(SlurmJobsRuntime.name, job_id, details)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _ancestors(proc: Path) -> set[int]:
    found, pid = set(), os.getpid()
    while pid > 1 and pid not in found:
        found.add(pid)
        stat = _read(proc / str(pid) / "stat")
        fields = stat[stat.rfind(b")") + 2 :].split()
        pid = int(fields[1]) if len(fields) > 1 else 0
    return found


def _cgroup_pids(job_id: str, cgroup_root: Path) -> set[int]:
    pids: set[int] = set()
    for pattern in CGROUP_GLOBS:
        for top in cgroup_root.glob(pattern.format(job=job_id)):
            for procs in [top / "cgroup.procs", *top.rglob("*/cgroup.procs")]:
                pids.update(int(p) for p in _read(procs).split() if p.isdigit())
    return pids


#: variables of a job's environment that tell its cluster apart (a host in two test clusters)
SAME_CLUSTER = ("SLURM_CLUSTER_NAME", "SLURM_CONF", "SLURM_JOB_UID")


def _environ(raw: bytes) -> dict[bytes, bytes]:
    found = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep:
            found[key] = value
    return found


def _the_job(raw: bytes, job_id: str, same: Mapping[str, str]) -> bool:
    """Whether an environment is one of the job's tasks (not a Prolog or Epilog of it)."""
    if f"\0SLURM_JOB_ID={job_id}\0".encode() not in b"\0" + raw:
        return False
    env = _environ(raw)
    if env.get(b"SLURM_SCRIPT_CONTEXT", b"") in _HOOKS:
        return False  # a Prolog or Epilog (tasks keep "prolog_task" from their task prolog)
    return all(env.get(k.encode(), v.encode()) == v.encode() for k, v in same.items())


def job_processes(
    job_id: str,
    files: Iterable[str] = (),
    *,
    same: Mapping[str, str] | None = None,
    by_environment: bool = True,
    by_cgroup: bool = True,
    proc: Path = Path("/proc"),
    cgroup_root: Path = Path("/sys/fs/cgroup"),
) -> list[int]:
    """The job's processes still on this node: those in its cgroup (proctrack/cgroup), those
    holding one of ``files`` open and, ``by_environment``, those whose environment says
    ``SLURM_JOB_ID=<job_id>`` (what proctrack/linuxproc loses when its slurmstepd dies) and
    agrees with ``same`` where it has those variables (default: this process's
    :data:`SAME_CLUSTER` ones, so another cluster's job of that id is not taken for it).

    Never this process, its ancestors (the epilog and slurmd), Slurm's daemons, nor a Prolog
    or Epilog (``SLURM_SCRIPT_CONTEXT`` ``prolog_slurmd``, ...).
    """
    wanted = {os.path.realpath(f) for f in files}
    if same is None:
        same = {k: os.environ[k] for k in SAME_CLUSTER if k in os.environ}
    skip = _ancestors(proc)
    found = _cgroup_pids(job_id, cgroup_root) if by_cgroup else set()
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        pid = int(entry.name)
        if by_environment and _the_job(_read(entry / "environ"), job_id, same):
            found.add(pid)
            continue
        if wanted:
            try:
                links = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
            except OSError:
                continue
            if wanted.intersection(links):
                found.add(pid)
    return sorted(p for p in found - skip if _read(proc / str(p) / "comm").strip() not in _DAEMONS)


def _gone(pid: int, proc: Path) -> bool:
    stat = _read(proc / str(pid) / "stat")
    return not stat or stat[stat.rfind(b")") + 2 :].startswith(b"Z")


def kill_processes(pids: Iterable[int], timeout: float, proc: Path = Path("/proc")) -> list[int]:
    """SIGKILL ``pids`` and wait up to ``timeout`` seconds for them to go; those left."""
    left = list(pids)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in left if not _gone(p, proc)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


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


@attrs.frozen
class JobInfo:
    """What ``scontrol show job`` says of a job (``state`` ``""``: Slurm does not know it)."""

    state: str
    start: str = ""
    sluid: str = ""
    text: str = ""


def parse_job(text: str) -> JobInfo:
    """A job's ``JobState``, ``StartTime`` and ``SLUID`` from ``scontrol show job`` output."""
    found = _STATE.search(text)
    if found is None:
        msg = f"no JobState in: {text.strip()[:200]}"
        raise RuntimeError(msg)
    start = _START.search(text)
    sluid = _SLUID.search(text)
    return JobInfo(
        found.group(1),
        start.group(1) if start else "",
        sluid.group(1) if sluid else "",
        text,
    )


async def job_info(
    job_id: str, scontrol: str = "scontrol", slurm_conf: str | None = None, *, detail: bool = False
) -> JobInfo:
    """What Slurm says of the job (``detail``: ``-d``, with the GRES indices).

    Raises ``OSError`` or ``TimeoutError`` when Slurm cannot be asked, ``RuntimeError`` when it
    answers something else.
    """
    argv = [scontrol, "show", "job", "-d" if detail else "-o", job_id]
    code, text = await run_slurm(argv, slurm_conf)
    if code != 0:
        if _UNKNOWN_JOB in text.lower():
            return JobInfo("")
        msg = f"{' '.join(argv)} failed ({code}): {text.strip()}"
        raise RuntimeError(msg)
    try:
        return parse_job(text)
    except RuntimeError:
        msg = f"{scontrol} show job {job_id} gave no JobState: {text.strip()[:200]}"
        raise RuntimeError(msg) from None


async def job_state(job_id: str, scontrol: str = "scontrol", slurm_conf: str | None = None) -> str:
    """The job's ``JobState`` (``""`` when Slurm does not know the job any more)."""
    return (await job_info(job_id, scontrol, slurm_conf)).state


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
            info = await job_info(
                handle.ident,
                handle.details.get("scontrol", "scontrol"),
                handle.details.get("slurm-conf"),
            )
        except (OSError, TimeoutError, RuntimeError) as exc:
            log.info("Slurm cannot be asked about job %s: %s", handle.ident, exc)
            return None
        same = _same_job(handle, info)
        if same and info.state and info.state not in FINAL_STATES:
            return True
        # over for Slurm: its processes holding its devices (or in its cgroup) keep it booked
        files = [f for f in handle.details.get("files", "").split("\n") if f]
        left = job_processes(handle.ident, files, by_environment=False, by_cgroup=same)
        if left:
            log.info("Slurm job %s is over but processes %s hold its devices", handle.ident, left)
        return bool(left)

    def describe(self, handle: WorkloadHandle) -> list[str]:
        return [f"Slurm job {handle.ident}"]


def _same_job(handle: WorkloadHandle, info: JobInfo) -> bool:
    """Whether Slurm's job of that id is the booked one (not the id used again)."""
    sluid, start = handle.details.get("sluid", ""), handle.details.get("start", "")
    if sluid and info.sluid and sluid != info.sluid:
        return False
    return not (start and info.start and start != info.start)
