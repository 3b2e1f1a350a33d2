"""A group of the unified (v2) cgroup hierarchy for a test, seen through a fake root tree."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path


def fake_root(tmp_path: Path, mount: Path, group: Path) -> Path:
    """``tmp_path/root``, where ``/proc/self`` puts the process in ``group`` of the unified
    hierarchy at ``/sys/fs/cgroup``, which links to the real ``mount``."""
    root = tmp_path / "root"
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/mountinfo").write_text(
        "41 31 0:38 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n"
    )
    (root / "proc/self/cgroup").write_text(f"0::/{group.name}\n")
    (root / "sys/fs").mkdir(parents=True)
    (root / "sys/fs/cgroup").symlink_to(mount)
    return root


def drain_and_remove(group: Path) -> None:
    """Kill whatever a failed test left in ``group`` and remove it with its subgroups."""
    if (group / "cgroup.kill").exists():
        with contextlib.suppress(OSError):
            (group / "cgroup.kill").write_text("1")
    deadline = time.monotonic() + 10
    while "populated 1" in (group / "cgroup.events").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    levels = [p for p in group.rglob("*") if p.is_dir()]
    for level in sorted(levels, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            level.rmdir()
    group.rmdir()
