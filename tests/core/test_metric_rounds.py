"""One gather round reads a workload's process tree once, whatever the number of plugins."""

from __future__ import annotations

import subprocess

from accelkit import cgroup
from accelkit.metrics import MetricContext


def test_process_tree_is_read_once_per_round(monkeypatch):
    child = subprocess.Popen(["sleep", "30"])
    try:
        reads: list[int] = []
        real = cgroup.process_tree

        def counting(pid, *, root="/"):
            reads.append(pid)
            return real(pid, root=root)

        monkeypatch.setattr(cgroup, "process_tree", counting)
        ctx = MetricContext()
        first = cgroup.round_process_tree(ctx, child.pid)
        second = cgroup.round_process_tree(ctx, child.pid)
        assert first == second == (child.pid,)
        assert reads == [child.pid]
        following = ctx.advance()
        assert following.round_cache == {}
        assert following.previous is ctx.previous
        cgroup.round_process_tree(following, child.pid)
        assert reads == [child.pid, child.pid]
    finally:
        child.kill()
        child.wait()
