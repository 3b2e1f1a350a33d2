"""The first process of a process-tree workload: waits for its plan, applies it, then execs.

Run as ``python -I -S launcher.py <plan fd> <status fd>`` (built-in modules only: it starts in
the time of a bare interpreter and never imports the caller's packages). Its pid is the
workload's leader pid from the start, which is why the ledger can record the leader before any
hook runs. ``python -I -S launcher.py serve <socket fd> [contain]`` is a fork server instead
(:func:`serve`): one interpreter that clones a launcher per request, each its caller's child,
so that a process starting many workloads starts one interpreter, not one per workload.

Protocol: the parent writes the plan (:func:`encode_plan`) to the plan pipe and closes it. The
plan is a sequence of NUL-terminated byte strings: the program to execute (a path, found on the
workload's ``PATH`` by the parent; else the bare name, searched for here), then the command, the
environment (``KEY=VALUE``) and the cgroups' ``cgroup.procs`` files, each a count followed by that
many items, then the CPU affinity (``0,1,5``; empty for none), the terminal (``<fds>:<path>``,
e.g. ``012:/dev/pts/3``; empty for none) and whether to contain the workload (``1`` or empty).
No argument, environment entry or path can hold a NUL, so this carries any of them exactly, in
the bytes the parent gave, and decoding it needs no module (``json`` would pull in ``re``: 7 ms
of start-up, which the workload's start would wait for).

A *setup* (:func:`encode_setup`) may come first on the same pipe, while the plan is not known
yet: a NUL (no plan starts with one: its program is not empty), the count and the files of the
cgroups to join, and whether to contain the workload. The launcher joins and contains itself
then, and the plan that follows needs no cgroup and no containment of its own: the parent sends
the setup as soon as the groups exist, so that this work overlaps the booking and the hooks
instead of delaying the start.

The launcher moves itself into each cgroup, writing ``0`` (the writer) to each file its plan
names (``cgroup.procs``, or a cgroup v1 ``tasks`` file: it has one thread), so the command is
contained from its first instruction (memory, cpuset, devices); it then sets its CPU affinity
and execs the command with that environment. Memory is never limited with ``RLIMIT_AS``: that
bounds address space, which thread stacks and CUDA's reservations use up without using memory.

*Containment* (a plan that asks for it: the parent has ``CAP_SYS_ADMIN``, as root does), after
joining the cgroups: the launcher enters a mount namespace of its own (mounts propagate into it
from the host, never out), remounts every cgroup file system read-only there, and drops
``CAP_SYS_ADMIN`` and ``CAP_SYS_PTRACE`` from its bounding and inheritable sets, so that the
command, even as root, can neither write a ``cgroup.procs`` file outside its group, nor remount
or mount a cgroup file system, nor enter another mount namespace, nor reach the host's through
``/proc/<pid>/root`` of a process with more capabilities. ``ctypes`` is imported for that only.

*Terminal* (a plan that names one): the launcher, the leader of a session of its own, opens the
pseudo-terminal, makes it its controlling terminal and puts it on the file descriptors the plan
lists, so that job control works (``bash -i``) and the terminal's Ctrl-C reaches the workload's
foreground job.

The status pipe is close-on-exec: the parent reading end-of-file with no data means the exec
succeeded; otherwise the launcher writes ``<status> <stage>: <error>`` and exits with that
status: 127 when the command is not found, 126 when it cannot be run (not executable, not a
program), 125 when the launcher itself failed (a plan it cannot read, a cgroup it cannot join).
An empty plan (the parent gave up or died) makes it exit 125 without running anything.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: importing typing would cost more than the whole launcher
if TYPE_CHECKING:  # the launcher imports nothing it need not: it starts before every workload
    from collections.abc import Iterable, Iterator, Mapping, Sequence
    from typing import NoReturn

EXIT_ABORTED = 125
#: the launcher itself failed (plan, cgroups, containment, terminal)
EXIT_FAILED = 125
#: the command exists but cannot be executed
EXIT_NOT_RUNNABLE = 126
#: the command was not found
EXIT_NOT_FOUND = 127
#: every status the launcher reports a failure with
FAILURE_STATUSES = (EXIT_FAILED, EXIT_NOT_RUNNABLE, EXIT_NOT_FOUND)
_ENOENT, _ENOTDIR = 2, 20
_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_SLAVE = 1, 32, 4096, 16384, 1 << 19
#: per-mount flags a read-only remount must keep (changing them is refused in a user namespace)
_MOUNT_FLAGS = {
    "nosuid": 2,
    "nodev": 4,
    "noexec": 8,
    "noatime": 1024,
    "nodiratime": 2048,
    "relatime": 1 << 21,
    "strictatime": 1 << 24,
}
_PR_CAPBSET_DROP = 24
_CAP_SYS_PTRACE, _CAP_SYS_ADMIN = 19, 21
#: what a contained workload must not have: the capabilities that undo its containment
DROPPED_CAPABILITIES = (_CAP_SYS_ADMIN, _CAP_SYS_PTRACE)
_TIOCSCTTY = 0x540E
_CLONE_PARENT = 0x00008000
#: clone(2)'s number on the machines whose launchers a fork server may clone (see :func:`serve`)
CLONE_SYSCALLS = {"x86_64": 56, "aarch64": 220, "riscv64": 220}


class PlanError(ValueError):
    """A plan the launcher cannot read."""


def encode_plan(
    argv: Sequence[str],
    env: Mapping[str, str],
    cpu_affinity: Iterable[int] | None = None,
    cgroup_procs: Sequence[str] = (),
    program: str | None = None,
    *,
    terminal: str = "",
    contain: bool = False,
) -> bytes:
    """The plan as the launcher reads it; ``ValueError`` for a NUL or an empty command.

    ``program`` is the file to execute (by default ``argv[0]``, searched for on ``env``'s
    ``PATH`` by the launcher unless it holds a slash); ``terminal`` is ``<fds>:<path>``
    (``012:/dev/pts/3``) or empty; ``contain`` asks for the mount namespace and the dropped
    capabilities of the module docstring.
    """
    program = argv[0] if argv and program is None else program
    if not argv or not program:
        msg = "the command is empty"
        raise ValueError(msg)
    fields = [program, str(len(argv)), *argv, str(len(env))]
    fields += [f"{key}={value}" for key, value in env.items()]
    fields += [str(len(cgroup_procs)), *cgroup_procs]
    fields.append("" if cpu_affinity is None else ",".join(str(int(c)) for c in cpu_affinity))
    fields += [terminal, "1" if contain else ""]
    encoded = [os.fsencode(field) for field in fields]
    if any(b"\0" in field for field in encoded):
        msg = "a command argument, environment entry or path holds a NUL byte"
        raise ValueError(msg)
    return b"".join(field + b"\0" for field in encoded)


def encode_setup(cgroup_procs: Sequence[str] = (), *, contain: bool = False) -> bytes:
    """The setup the launcher does before its plan: join ``cgroup_procs``, then (``contain``)
    contain itself; sent ahead of the plan, on the same pipe (``ValueError`` for a NUL)."""
    fields = [str(len(cgroup_procs)), *cgroup_procs, "1" if contain else ""]
    encoded = [os.fsencode(field) for field in fields]
    if any(b"\0" in field for field in encoded):
        msg = "a cgroup path holds a NUL byte"
        raise ValueError(msg)
    return b"\0" + b"".join(field + b"\0" for field in encoded)


def split_setup(data: bytes) -> tuple[list[bytes], bool, bytes] | None:
    """The cgroup files and containment of the setup at the start of ``data`` and what follows
    it; ``None`` while it is not whole (``PlanError`` for one that is malformed)."""
    fields = data[1:].split(b"\0")
    if len(fields) < 2:
        return None
    if not fields[0].isdigit():
        msg = f"expected a count, got {fields[0]!r}"
        raise PlanError(msg)
    count = int(fields[0])
    if len(fields) < count + 3:
        return None
    flag = fields[count + 1]
    if flag not in (b"", b"1"):
        msg = f"bad containment flag {flag!r}"
        raise PlanError(msg)
    used = 1 + sum(len(field) + 1 for field in fields[: count + 2])
    return fields[1 : count + 1], flag == b"1", data[used:]


class Plan:
    """A decoded plan (a plain class: ``dataclasses`` or ``typing`` would cost start-up)."""

    __slots__ = ("command", "contain", "cpus", "env", "procs", "program", "terminal")

    def __init__(  # noqa: PLR0917 - built in one place, from the plan's fields in order
        self,
        program: bytes,
        command: list[bytes],
        env: dict[bytes, bytes],
        procs: list[bytes],
        cpus: list[int] | None,
        terminal: bytes = b"",
        contain: bool = False,
    ) -> None:
        self.program, self.command, self.env, self.procs = program, command, env, procs
        self.cpus, self.terminal, self.contain = cpus, terminal, contain

    def __iter__(self) -> Iterator[object]:
        """The first five fields, as a tuple of them reads."""
        return iter((self.program, self.command, self.env, self.procs, self.cpus))

    def __getitem__(self, index: int) -> object:
        return (self.program, self.command, self.env, self.procs, self.cpus)[index]


def decode_plan(data: bytes) -> Plan:
    """The program, command, environment, ``cgroup.procs`` files, CPU affinity, terminal and
    containment of a plan."""
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
    affinity, terminal, contain = next(fields, None), next(fields, None), next(fields, None)
    if contain is None or next(fields, None) is not None or not argv or not program:
        msg = "malformed plan"
        raise PlanError(msg)
    assert affinity is not None
    assert terminal is not None
    try:
        cpus = [int(cpu) for cpu in affinity.split(b",")] if affinity else None
    except ValueError:
        msg = f"bad CPU affinity {affinity!r}"
        raise PlanError(msg) from None
    fds, sep, path = terminal.partition(b":")
    if terminal and (not sep or not path or not fds or fds.strip(b"012")):
        msg = f"bad terminal {terminal!r}"
        raise PlanError(msg)
    if contain not in (b"", b"1"):
        msg = f"bad containment flag {contain!r}"
        raise PlanError(msg)
    return Plan(program, argv, env, procs, cpus, terminal, contain == b"1")


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _fail(
    status_fd: int, stage: str, exc: BaseException | str, status: int = EXIT_FAILED
) -> NoReturn:
    os.write(status_fd, f"{status} {stage}: {exc}".encode(errors="replace"))
    os._exit(status)


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (``\\040`` is a space), without ``re``."""
    parts = field.split("\\")
    out = [parts[0]]
    for part in parts[1:]:
        code = part[:3]
        if len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)) + part[3:])
        else:
            out.append("\\" + part)
    return "".join(out)


def cgroup_mounts(mountinfo: str) -> list[tuple[str, int]]:
    """The mount points of the cgroup file systems in a ``mountinfo`` text, with the
    per-mount flags a remount must keep."""
    found = []
    for line in mountinfo.splitlines():
        before, sep, after = line.partition(" - ")
        fields, fs = before.split(), after.split()
        if not sep or len(fields) < 6 or not fs or fs[0] not in ("cgroup", "cgroup2"):
            continue
        flags = 0
        for option in fields[5].split(","):
            flags |= _MOUNT_FLAGS.get(option, 0)
        found.append((_unescape(fields[4]), flags))
    return found


def contain() -> None:
    """Make every cgroup file system read-only in a mount namespace of this process's own and
    drop :data:`DROPPED_CAPABILITIES` (``OSError`` naming the step that failed)."""
    import ctypes  # only for contained workloads: it costs start-up (see :func:`main`)

    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"{what}: {os.strerror(number)}")

    check(libc.unshare(_CLONE_NEWNS), "cannot make a mount namespace")
    check(libc.mount(None, b"/", None, _MS_REC | _MS_SLAVE, None), "cannot make / a slave mount")
    with open("/proc/self/mountinfo") as file:
        mounts = cgroup_mounts(file.read())
    for point, flags in mounts:
        remount = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags
        check(libc.mount(None, os.fsencode(point), None, remount, None), f"cannot remount {point}")
    for cap in DROPPED_CAPABILITIES:
        check(libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), f"cannot drop capability {cap}")

    class Header(ctypes.Structure):
        _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))

    class Data(ctypes.Structure):
        _fields_ = (
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        )

    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
    check(libc.capget(ctypes.byref(header), data), "cannot read capabilities")
    for cap in DROPPED_CAPABILITIES:  # inheritable (and so ambient) capabilities survive exec
        data[cap // 32].inheritable &= ~(1 << cap % 32)
    check(libc.capset(ctypes.byref(header), data), "cannot drop inheritable capabilities")


def attach_terminal(terminal: bytes) -> None:
    """Open the terminal ``<fds>:<path>`` as this session leader's controlling terminal and
    put it on those descriptors."""
    import fcntl  # only for a workload with a terminal

    fds, _, path = terminal.partition(b":")
    fd = os.open(path, os.O_RDWR)
    fcntl.ioctl(fd, _TIOCSCTTY, 0)
    for target in fds:
        os.dup2(fd, target - ord("0"))
    if fd > 2:
        os.close(fd)


def _default_signals() -> None:
    """Put back the default actions of the signals this interpreter ignores at start-up
    (``SIGPIPE``, ``SIGXFSZ``): an ignored signal stays ignored across ``exec``, and the
    command must get the actions it would get from ``subprocess`` (``restore_signals``)."""
    import _signal  # type: ignore[import-not-found]  # built in: signal.py imports enum

    for signum in (_signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(signum, _signal.SIG_DFL)


def _join(procs: Iterable[bytes]) -> None:
    """Join the cgroups of these ``cgroup.procs`` or ``tasks`` files, writing ``0`` (the writer
    itself: its one thread through a ``tasks`` file)."""
    for path in procs:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)


def _set_up(plan_fd: int, status_fd: int, data: bytes) -> bytes:
    """Do the setup at the start of ``data`` (read on until it is whole); what follows it."""
    try:
        while (setup := split_setup(data)) is None:
            chunk = os.read(plan_fd, 65536)
            if not chunk:  # the parent gave up or died
                os._exit(EXIT_ABORTED)
            data += chunk
    except PlanError as exc:
        _fail(status_fd, "plan", exc)
    procs, contained, rest = setup
    stage = "setup"
    try:
        _join(procs)
        stage = "containment"
        if contained:
            contain()
    except OSError as exc:
        _fail(status_fd, stage, exc)
    return rest


def main(argv: list[str]) -> None:
    """Apply the plan read from ``argv[1]`` and exec; report failures on ``argv[2]``.

    ``argv[3] == "contain"`` (a parent that will ask for containment) imports ``ctypes`` while
    the plan is awaited, so that its 3 ms are not spent between the plan and the exec.
    """
    plan_fd, status_fd = int(argv[1]), int(argv[2])
    os.set_inheritable(status_fd, False)  # closed by a successful exec
    _default_signals()
    if argv[3:4] == ["contain"]:
        import ctypes  # noqa: F401 - imported ahead: contain() finds it in sys.modules
    data = os.read(plan_fd, 65536)
    if data.startswith(b"\0"):  # a setup first: no plan starts with NUL (its program is not empty)
        data = _set_up(plan_fd, status_fd, data)
    data += _read_all(plan_fd)
    if not data:
        os._exit(EXIT_ABORTED)
    try:
        plan = decode_plan(data)
    except PlanError as exc:
        _fail(status_fd, "plan", exc)
        return
    program, command, env = plan.program, plan.command, plan.env
    try:
        _join(plan.procs)
        if plan.cpus is not None:
            os.sched_setaffinity(0, plan.cpus)
    except OSError as exc:
        _fail(status_fd, "setup", exc)
        return
    stage = "containment"
    try:
        if plan.contain:
            contain()
        stage = "terminal"
        if plan.terminal:
            attach_terminal(plan.terminal)
    except OSError as exc:
        _fail(status_fd, stage, exc)
        return
    try:
        if b"/" in program:  # found by the parent: no PATH search (nor the module it imports)
            os.execve(program, command, env)  # noqa: S606 - running the user's command is the point
        os.execvpe(program, command, env)  # noqa: S606
    except OSError as exc:
        # the stage names the program; the error's own text would name it again, as bytes
        reason = f"[Errno {exc.errno}] {exc.strerror}" if exc.strerror else str(exc)
        status = EXIT_NOT_FOUND if exc.errno in (_ENOENT, _ENOTDIR) else EXIT_NOT_RUNNABLE
        _fail(status_fd, f"cannot run {os.fsdecode(command[0])!r}", reason, status)


def _received_fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    """The descriptors of a message's ``SCM_RIGHTS`` (native ``int``s)."""
    fds = []
    for _level, _kind, data in ancdata:
        usable = len(data) - len(data) % 4
        fds += [int.from_bytes(data[i : i + 4], sys.byteorder) for i in range(0, usable, 4)]
    return fds


def serve(ctl_fd: int, contain_ahead: bool) -> None:
    """The fork server: clone a launcher for each request on the socket ``ctl_fd``.

    A request is one byte carrying two descriptors (``SCM_RIGHTS``): the launcher's plan and
    status pipes, as :func:`main` takes them. The server clones itself with ``CLONE_PARENT``,
    so the clone is its caller's child, as a launcher the caller started would be; the clone
    starts a session of its own and runs :func:`main`. The reply is the clone's pid and a
    newline, or ``-<errno>`` when the clone failed. The server ends at end of file (its caller
    closed the socket, or died). ``contain_ahead`` is :func:`main`'s ``contain`` argument.
    """
    import _socket  # built in: socket.py imports enum
    import ctypes  # for clone(2), and what containment uses: imported once, for every clone

    number = CLONE_SYSCALLS[os.uname().machine]
    libc = ctypes.PyDLL(None, use_errno=True)  # the interpreter's lock held, as os.fork holds it
    clone, api = libc.syscall, ctypes.pythonapi
    clone.restype = ctypes.c_long
    sock = _socket.socket(fileno=ctl_fd)
    space = _socket.CMSG_SPACE(8)
    while True:
        data, ancdata, _flags, _address = sock.recvmsg(1, space)
        fds = _received_fds(ancdata)
        if not data or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            if not data:
                return
            sock.sendall(b"-22\n")  # EINVAL
            continue
        ready_r, ready_w = os.pipe()  # closed by the clone once it leads its own session
        api.PyOS_BeforeFork()
        pid = clone(number, _CLONE_PARENT, 0, 0, 0, 0)
        if pid == 0:
            try:
                api.PyOS_AfterFork_Child()
                sock.close()
                os.close(ready_r)
                os.setsid()
                os.close(ready_w)
                ahead = ["contain"] if contain_ahead else []
                main(["launcher", str(fds[0]), str(fds[1]), *ahead])
            finally:  # main execs or exits; never back into the server's loop
                os._exit(EXIT_FAILED)
        failed = ctypes.get_errno() if pid < 0 else 0
        api.PyOS_AfterFork_Parent()
        os.close(ready_w)
        os.read(ready_r, 1)  # end of file: the clone has its session (or is gone), as Popen's
        os.close(ready_r)
        for fd in fds:
            os.close(fd)
        sock.sendall(f"{-failed if failed else pid}\n".encode())


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(int(sys.argv[2]), sys.argv[3:4] == ["contain"])
    else:
        main(sys.argv)
