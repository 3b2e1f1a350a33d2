"""Fake host filesystems and real child processes, for testing plugins that read the host.

:class:`FakeHost` builds ``proc/``, ``sys/`` and cgroup mounts in a temporary directory for
readers that take a root path (as :mod:`accelkit.cgroup` does); :func:`spawn_python` and
:func:`finish` run a real child process whose metrics a test can read.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

__all__ = ["FakeHost", "finish", "spawn_python"]


class FakeHost:
    """Builds ``proc/``, ``sys/`` and cgroup mounts under ``root`` for the root-taking readers."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._mounts: list[str] = []

    def write(self, relative: str, text: str) -> Path:
        path = self.root / relative.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def _mount(self, line: str) -> None:
        self._mounts.append(line)
        extra = "25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        self.write("proc/self/mountinfo", extra + "\n".join(self._mounts) + "\n")

    def mount_v1(self, controllers: str, point: str, mount_root: str = "/") -> Path:
        n = len(self._mounts) + 30
        self._mount(f"{n} 25 0:{n} {mount_root} {point} rw,nosuid - cgroup cgroup rw,{controllers}")
        return self.root / point.lstrip("/")

    def mount_v2(self, point: str = "/sys/fs/cgroup", mount_root: str = "/") -> Path:
        n = len(self._mounts) + 30
        self._mount(f"{n} 25 0:{n} {mount_root} {point} rw,nosuid - cgroup2 cgroup2 rw")
        return self.root / point.lstrip("/")

    def member(self, *lines: str, pid: str = "self") -> None:
        self.write(f"proc/{pid}/cgroup", "\n".join(lines) + "\n")

    def process(
        self,
        pid: int,
        ppid: int,
        *,
        children: Iterable[int] = (),
        comm: str = "worker",
        ticks: tuple[int, int, int, int] = (0, 0, 0, 0),
        rss_pages: int = 0,
    ) -> None:
        """A process with its stat, statm and children files (one thread)."""
        utime, stime, cutime, cstime = ticks
        rest = " ".join(["0"] * 30)
        head = f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 0 0 0 0 0"
        stat = f"{head} {utime} {stime} {cutime} {cstime} {rest}"
        self.write(f"proc/{pid}/stat", stat + "\n")
        self.write(f"proc/{pid}/statm", f"1000 {rss_pages} 10 1 0 100 0\n")
        self.write(f"proc/{pid}/task/{pid}/children", "".join(f"{c} " for c in children))


def spawn_python(code: str) -> subprocess.Popen[str]:
    """A Python child running ``code``, which should print one line when ready."""
    return subprocess.Popen(  # noqa: S603 - the test's own code, run by this interpreter
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def finish(child: subprocess.Popen[str]) -> None:
    """Close a child's stdin (its cue to exit) and reap it."""
    if child.stdin is not None:
        child.stdin.close()
    child.wait(timeout=60)
