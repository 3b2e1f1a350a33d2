"""The first process of a process-tree workload: waits for its plan, applies it, then execs.

Run as ``python -I -S launcher.py <plan fd> <status fd>`` (standard library only, so it starts
fast and never imports the caller's packages). Its pid is the workload's leader pid from the
start, which is why the ledger can record the leader before any hook runs.

Protocol: the parent writes one JSON object to the plan pipe and closes it::

    {"argv": [...], "env": {...}, "cpu_affinity": [0, 1] | null,
     "cgroup_procs": ["/sys/fs/cgroup/memory/.../cgroup.procs", ...]}

The launcher moves itself into each cgroup (so the command is contained from its first
instruction: memory, cpuset, devices), sets its CPU affinity and execs ``argv`` with ``env``.
Memory is never limited with ``RLIMIT_AS``: that bounds address space, which thread stacks and
CUDA's reservations use up without using memory. The status pipe is close-on-exec: the parent
reading end-of-file with no data means the exec succeeded; otherwise the launcher writes
``<stage>: <error>`` and exits 127.
An empty plan (the parent gave up or died) makes it exit 125 without running anything.
"""

from __future__ import annotations

import json
import os
import sys

EXIT_ABORTED = 125
EXIT_FAILED = 127


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _fail(status_fd: int, stage: str, exc: BaseException) -> None:
    os.write(status_fd, f"{stage}: {exc}".encode(errors="replace"))
    os._exit(EXIT_FAILED)


def main(argv: list[str]) -> None:
    """Apply the plan read from ``argv[1]`` and exec; report failures on ``argv[2]``."""
    plan_fd, status_fd = int(argv[1]), int(argv[2])
    os.set_inheritable(status_fd, False)  # closed by a successful exec
    data = _read_all(plan_fd)
    if not data:
        os._exit(EXIT_ABORTED)
    try:
        plan = json.loads(data)
        command = [str(a) for a in plan["argv"]]
        env = {str(k): str(v) for k, v in plan["env"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        _fail(status_fd, "plan", exc)
        return
    try:
        for path in plan.get("cgroup_procs") or ():
            with open(str(path), "w") as procs:
                procs.write(str(os.getpid()))
        if plan.get("cpu_affinity") is not None:
            os.sched_setaffinity(0, [int(c) for c in plan["cpu_affinity"]])
    except (OSError, ValueError) as exc:
        _fail(status_fd, "setup", exc)
        return
    try:
        os.execvpe(command[0], command, env)  # noqa: S606 - running the user's command is the point
    except OSError as exc:
        _fail(status_fd, f"cannot run {command[0]!r}", exc)


if __name__ == "__main__":
    main(sys.argv)
