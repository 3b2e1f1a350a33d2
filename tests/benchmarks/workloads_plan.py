"""Registers the partition-plan benchmarks of :mod:`bench_plan` with the harness."""

from __future__ import annotations

import bench_plan

bench_plan.register()
