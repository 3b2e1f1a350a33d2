"""Where a process's cgroups and descendants are, read from procfs (cgroup v1, v2 and hybrid).

Every reader takes a ``root`` directory (``/`` on a real host) under which ``proc/`` and the cgroup
mount points are looked up, so tests build fake trees in a temporary directory. A missing file
means "not there" (``None`` or an empty result); a file whose contents cannot be parsed raises
:class:`CgroupFormatError` naming the file.

A helper for plugin authors, part of the stable plugin-author surface (``docs/stability.md``):
a plugin that measures or limits workloads through cgroups reads them here, as the shipped
``cpu`` and ``mem`` plugins do (and accelkit's process runtime, which makes the cgroups).

Workload ids. :meth:`WorkloadLocation.parse` reads a workload id as one of:

* ``"pid:<n>"`` (how the process runtime names its workloads) or a bare ``"<n>"``: process
  ``n`` and all its descendants (:func:`process_tree`); the cgroup of ``n``, when it has one of
  its own, holds the whole workload;
* ``"cgroup:<path>"``: the processes of cgroup ``<path>``, written as in ``/proc/<pid>/cgroup``
  (relative to the hierarchy root, e.g. ``cgroup:/system.slice/job.service``).
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from accelkit.errors import PluginError
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr

if TYPE_CHECKING:
    from accelkit.metrics import MetricContext

__all__ = [
    "CgroupDir",
    "CgroupFS",
    "CgroupFormatError",
    "CgroupMembership",
    "CgroupMount",
    "WorkloadLocation",
    "parse_mountinfo",
    "parse_proc_cgroup",
    "process_tree",
    "round_process_tree",
]

log = logging.getLogger(__name__)

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


class CgroupFormatError(PluginError):
    """A cgroup or procfs file holds something that cannot be parsed."""


def _unescape(field: str) -> str:
    """Undo mountinfo's octal escapes (``\\040`` is a space)."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m[1], 8)), field)


@attrs.frozen(repr=False)
class CgroupMount:
    """One cgroup hierarchy mounted somewhere, as ``/proc/<pid>/mountinfo`` lists it."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    mount_point: str  # absolute, e.g. "/sys/fs/cgroup/memory"
    mount_root: str  # the cgroup mounted there: "/", or "/docker/<id>" in some containers
    version: int  # 1 or 2
    options: frozenset[str] = frozenset()  # v1 super options: the controllers, "name=systemd"...


def parse_mountinfo(text: str, *, source: str = "mountinfo") -> tuple[CgroupMount, ...]:
    """The cgroup mounts in a ``mountinfo`` text; other mounts are skipped."""
    mounts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split()
        try:
            separator = fields.index("-")
        except ValueError:
            separator = -1
        if separator < 6 or len(fields) < separator + 4:
            msg = f"{source}, line {number}: not a mountinfo line: {line!r}"
            raise CgroupFormatError(msg)
        fstype = fields[separator + 1]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        options = fields[separator + 3].split(",") if fstype == "cgroup" else ()
        mounts.append(
            CgroupMount(
                mount_point=_unescape(fields[4]),
                mount_root=_unescape(fields[3]),
                version=2 if fstype == "cgroup2" else 1,
                options=frozenset(options),
            )
        )
    return tuple(mounts)


@attrs.frozen(repr=False)
class CgroupMembership:
    """One line of ``/proc/<pid>/cgroup``: the cgroup a process is in, in one hierarchy."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    hierarchy_id: int
    controllers: frozenset[str]  # empty for the v2 (unified) hierarchy
    path: str


def parse_proc_cgroup(text: str, *, source: str = "cgroup") -> tuple[CgroupMembership, ...]:
    """The memberships listed in a ``/proc/<pid>/cgroup`` text."""
    memberships = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith("/"):
            msg = f"{source}, line {number}: expected 'id:controllers:/path', got {line!r}"
            raise CgroupFormatError(msg)
        controllers = frozenset(c for c in parts[1].split(",") if c)
        memberships.append(CgroupMembership(int(parts[0]), controllers, parts[2]))
    return tuple(memberships)


@attrs.frozen(repr=False)
class CgroupDir:
    """One cgroup's directory in one mounted hierarchy."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    path: Path
    version: int
    top: Path  # the mount point: ancestors() stop there

    def read(self, name: str) -> str | None:
        """The text of a file in this cgroup, or ``None`` when it does not exist."""
        try:
            return (self.path / name).read_text()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read_int(self, name: str) -> int | None:
        """A single-number file; ``None`` when missing or ``max`` (no limit)."""
        text = self.read(name)
        if text is None or text.strip() == "max":
            return None
        try:
            return int(text.strip())
        except ValueError:
            msg = f"{self.path / name}: expected a number or 'max', got {text.strip()[:80]!r}"
            raise CgroupFormatError(msg) from None

    def read_keyed(self, name: str) -> dict[str, int] | None:
        """A ``key value`` per line file (``memory.stat``, ``cpu.stat``); ``None`` when missing."""
        text = self.read(name)
        if text is None:
            return None
        values = {}
        for line in text.splitlines():
            key, _, value = line.strip().partition(" ")
            if not key:
                continue
            try:
                values[key] = int(value)
            except ValueError:
                msg = f"{self.path / name}: expected 'key number' lines, got {line.strip()[:80]!r}"
                raise CgroupFormatError(msg) from None
        return values

    def ancestors(self) -> Iterator[CgroupDir]:
        """This cgroup, then each parent up to and including the hierarchy's mount point."""
        path = self.path
        while True:
            yield CgroupDir(path, self.version, self.top)
            if path in (self.top, path.parent):
                return
            path = path.parent


def _safe_cgroup_path(path: str) -> str:
    if not path.startswith("/") or ".." in path.split("/"):
        msg = f"a cgroup path must be absolute without '..', got {path!r}"
        raise ValueError(msg)
    return posixpath.normpath(path)


@attrs.frozen(repr=False)
class CgroupFS:
    """The cgroup hierarchies mounted under ``root``, as ``proc/self/mountinfo`` shows them."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    root: Path
    mounts: tuple[CgroupMount, ...]

    @classmethod
    def read(cls, root: Path | str = "/") -> CgroupFS:
        """Read the mounts; a missing ``mountinfo`` means no cgroups."""
        root = Path(root)
        source = root / "proc/self/mountinfo"
        try:
            text = source.read_text()
        except FileNotFoundError:
            return cls(root, ())
        return cls(root, parse_mountinfo(text, source=str(source)))

    def _mounts_for(self, controller: str) -> tuple[tuple[CgroupMount, ...], int]:
        """The hierarchy holding ``controller``: its v1 mounts when it has one, else v2."""
        v1 = tuple(m for m in self.mounts if m.version == 1 and controller in m.options)
        if v1:
            return v1, 1
        return tuple(m for m in self.mounts if m.version == 2), 2

    def _resolve(self, mounts: tuple[CgroupMount, ...], path: str) -> CgroupDir | None:
        path = _safe_cgroup_path(path)
        for mount in mounts:
            top = self.root / mount.mount_point.lstrip("/")
            base = mount.mount_root.rstrip("/")
            if path == base or path.startswith(base + "/") or base == "":
                relative = path[len(base) :].lstrip("/")
                return CgroupDir(top / relative if relative else top, mount.version, top)
        return None

    def directory(self, controller: str, cgroup_path: str) -> CgroupDir | None:
        """Cgroup ``cgroup_path`` in the hierarchy of ``controller`` (a v1 name such as
        ``"memory"`` or ``"cpuacct"``), or ``None`` when no mounted hierarchy shows it."""
        mounts, _version = self._mounts_for(controller)
        return self._resolve(mounts, cgroup_path)

    def memberships(self, pid: int | str = "self") -> tuple[CgroupMembership, ...]:
        """The cgroups of a process (``()`` when it or its ``cgroup`` file is gone)."""
        source = self.root / "proc" / str(pid) / "cgroup"
        try:
            text = source.read_text()
        except (FileNotFoundError, ProcessLookupError):
            return ()
        return parse_proc_cgroup(text, source=str(source))

    def process_directory(
        self,
        controller: str,
        pid: int | str = "self",
        memberships: Sequence[CgroupMembership] | None = None,
    ) -> CgroupDir | None:
        """The cgroup of a process in the hierarchy of ``controller``, or ``None``
        (``memberships``: the process's, read already by :meth:`memberships`)."""
        mounts, version = self._mounts_for(controller)
        if not mounts:
            return None
        for membership in self.memberships(pid) if memberships is None else memberships:
            unified = membership.hierarchy_id == 0 and not membership.controllers
            if (version == 2 and unified) or (
                version == 1 and controller in membership.controllers
            ):
                return self._resolve(mounts, membership.path)
        return None


@attrs.frozen(repr=False)
class WorkloadLocation:
    """Where a workload's processes are: a cgroup, or the tree under a leader process."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    cgroup_path: str | None = None
    pid: int | None = None

    @classmethod
    def parse(cls, workload_id: str) -> WorkloadLocation:
        """Read ``cgroup:<path>``, ``pid:<n>`` or ``<n>``; raise ``ValueError`` otherwise."""
        kind, sep, value = workload_id.partition(":")
        if sep and kind == "cgroup":
            return cls(cgroup_path=_safe_cgroup_path(value))
        number = value if sep and kind == "pid" else workload_id if not sep else ""
        if number.isdigit() and int(number) > 0:
            return cls(pid=int(number))
        msg = (
            f"cannot locate workload {workload_id!r}: expected 'cgroup:/<path>', 'pid:<n>' or '<n>'"
        )
        raise ValueError(msg)

    @classmethod
    def of(cls, workload_id: str) -> WorkloadLocation | None:
        """Like :meth:`parse`, but ``None`` (logged) for an id that names no location.

        Metrics use it: a workload that cannot be located simply has no metrics.
        """
        try:
            return cls.parse(workload_id)
        except ValueError as exc:
            log.debug("no metrics for workload %r: %s", workload_id, exc)
            return None


def _children_by_scan(proc: str) -> dict[int, list[int]]:
    """Every process's children, from the parent pid in each ``/proc/<pid>/stat``."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"{entry.path}/stat", "rb") as file:
                stat = file.read()
        except (FileNotFoundError, NotADirectoryError, ProcessLookupError):
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def _direct_children(proc: str, pid: int) -> list[int] | None:
    """Children from ``task/<tid>/children``; ``None`` when the kernel lacks those files.

    String paths rather than :class:`~pathlib.Path`: this runs once per process per gather.
    """
    task = f"{proc}/{pid}/task"
    try:
        tids = os.listdir(task)
    except (FileNotFoundError, NotADirectoryError, ProcessLookupError):
        return []
    found: list[int] = []
    for tid in tids:
        try:
            with open(f"{task}/{tid}/children", "rb") as file:
                found.extend(int(c) for c in file.read().split())
        except FileNotFoundError:
            if os.path.isdir(f"{task}/{tid}"):
                return None
            # the thread ended meanwhile
    return found


def process_tree(pid: int, *, root: Path | str = "/") -> tuple[int, ...]:
    """``pid`` and its descendants, parents before children; ``()`` when ``pid`` is gone.

    Reads ``/proc/<pid>/task/<tid>/children``, which costs the size of the tree rather than of the
    whole process table; falls back to scanning every process's parent when that file is absent.
    """
    proc = os.path.join(os.fspath(root), "proc")
    tree = [pid]
    seen = {pid}
    scanned: dict[int, list[int]] | None = None
    index = 0
    while index < len(tree):
        current = tree[index]
        index += 1
        kids = _direct_children(proc, current) if scanned is None else None
        if kids is None:
            scanned = scanned if scanned is not None else _children_by_scan(proc)
            kids = scanned.get(current, [])
        if not kids and current == pid and not os.path.isdir(f"{proc}/{pid}"):
            return ()  # the leader is gone (checked only when it shows no children)
        for kid in kids:
            if kid not in seen:
                seen.add(kid)
                tree.append(kid)
    return tuple(tree)


def round_process_tree(ctx: MetricContext, pid: int, *, root: Path | str = "/") -> tuple[int, ...]:
    """:func:`process_tree`, read once per gather round and shared by every plugin of it."""
    key = ("process_tree", os.fspath(root), pid)
    tree: tuple[int, ...] | None = ctx.round_cache.get(key)
    if tree is None:
        tree = ctx.round_cache[key] = process_tree(pid, root=root)
    return tree
