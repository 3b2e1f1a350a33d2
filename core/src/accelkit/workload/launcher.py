"""The first process of a process-tree workload: waits for its plan, applies it, then execs.

Run as ``python -I -S launcher.py <plan fd> <status fd>`` (built-in modules only: it starts in
the time of a bare interpreter and never imports the caller's packages). Its pid is the
workload's leader pid from the start, which is why the ledger can record the leader before any
hook runs.

Protocol: the parent writes the plan (:func:`encode_plan`) to the plan pipe and closes it. The
plan is a sequence of NUL-terminated byte strings: the program to execute (a path, found on the
workload's ``PATH`` by the parent; else the bare name, searched for here), then the command, the
environment (``KEY=VALUE``) and the cgroups' ``cgroup.procs`` files, each a count followed by that
many items, then the CPU affinity (``0,1,5``; empty for none). No argument, environment entry or
path can hold a NUL, so this carries any of them exactly, in the bytes the parent gave, and
decoding it needs no module (``json`` would pull in ``re``: 7 ms of start-up, which the
workload's start would wait for).

The launcher moves itself into each cgroup, writing ``0`` (the writer) to each file its plan
names (``cgroup.procs``, or a cgroup v1 ``tasks`` file: it has one thread), so the command is
contained from its first instruction (memory, cpuset, devices); it then sets its CPU affinity
and execs the command with that environment. Memory is never limited with ``RLIMIT_AS``: that
bounds address space, which thread stacks and CUDA's reservations use up without using memory.
The status pipe is close-on-exec: the parent reading end-of-file with no data means the exec
succeeded; otherwise the launcher writes ``<stage>: <error>`` and exits 127. An empty plan (the
parent gave up or died) makes it exit 125 without running anything.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: importing typing would cost more than the whole launcher
if TYPE_CHECKING:  # the launcher imports nothing it need not: it starts before every workload
    from collections.abc import Iterable, Mapping, Sequence

EXIT_ABORTED = 125
EXIT_FAILED = 127


class PlanError(ValueError):
    """A plan the launcher cannot read."""


def encode_plan(
    argv: Sequence[str],
    env: Mapping[str, str],
    cpu_affinity: Iterable[int] | None = None,
    cgroup_procs: Sequence[str] = (),
    program: str | None = None,
) -> bytes:
    """The plan as the launcher reads it; ``ValueError`` for a NUL or an empty command.

    ``program`` is the file to execute (by default ``argv[0]``, searched for on ``env``'s
    ``PATH`` by the launcher unless it holds a slash).
    """
    program = argv[0] if argv and program is None else program
    if not argv or not program:
        msg = "the command is empty"
        raise ValueError(msg)
    fields = [program, str(len(argv)), *argv, str(len(env))]
    fields += [f"{key}={value}" for key, value in env.items()]
    fields += [str(len(cgroup_procs)), *cgroup_procs]
    fields.append("" if cpu_affinity is None else ",".join(str(int(c)) for c in cpu_affinity))
    encoded = [os.fsencode(field) for field in fields]
    if any(b"\0" in field for field in encoded):
        msg = "a command argument, environment entry or path holds a NUL byte"
        raise ValueError(msg)
    return b"".join(field + b"\0" for field in encoded)


def decode_plan(
    data: bytes,
) -> tuple[bytes, list[bytes], dict[bytes, bytes], list[bytes], list[int] | None]:
    """The program, command, environment, ``cgroup.procs`` files and CPU affinity of a plan."""
    if not data.endswith(b"\0"):
        msg = "truncated plan"
        raise PlanError(msg)
    fields = iter(data[:-1].split(b"\0"))
    program = next(fields)

    def counted() -> list[bytes]:
        count = next(fields, b"")
        if not count.isdigit():
            msg = f"expected a count, got {count!r}"
            raise PlanError(msg)
        items = [next(fields, None) for _ in range(int(count))]
        if None in items:
            msg = "truncated plan"
            raise PlanError(msg)
        return [item for item in items if item is not None]

    argv = counted()
    env: dict[bytes, bytes] = {}
    for entry in counted():
        key, sep, value = entry.partition(b"=")
        if not sep or not key:
            msg = f"bad environment entry {entry!r}"
            raise PlanError(msg)
        env[key] = value
    procs = counted()
    affinity = next(fields, None)
    if affinity is None or next(fields, None) is not None or not argv or not program:
        msg = "malformed plan"
        raise PlanError(msg)
    try:
        cpus = [int(cpu) for cpu in affinity.split(b",")] if affinity else None
    except ValueError:
        msg = f"bad CPU affinity {affinity!r}"
        raise PlanError(msg) from None
    return program, argv, env, procs, cpus


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _fail(status_fd: int, stage: str, exc: BaseException | str) -> None:
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
        program, command, env, procs, cpus = decode_plan(data)
    except PlanError as exc:
        _fail(status_fd, "plan", exc)
        return
    try:
        for path in procs:  # "0": the writer itself (one thread through a ``tasks`` file)
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
    except OSError as exc:
        _fail(status_fd, "setup", exc)
        return
    try:
        if b"/" in program:  # found by the parent: no PATH search (nor the module it imports)
            os.execve(program, command, env)  # noqa: S606 - running the user's command is the point
        os.execvpe(program, command, env)  # noqa: S606
    except OSError as exc:
        # the stage names the program; the error's own text would name it again, as bytes
        reason = f"[Errno {exc.errno}] {exc.strerror}" if exc.strerror else str(exc)
        _fail(status_fd, f"cannot run {os.fsdecode(command[0])!r}", reason)


if __name__ == "__main__":
    main(sys.argv)
