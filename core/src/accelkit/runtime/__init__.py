"""Runtimes that contain workloads: a cgroup per process tree, Docker containers (DESIGN §14)."""

from __future__ import annotations

from accelkit.runtime.base import (
    LaunchSpec,
    Runtime,
    RuntimeUnavailable,
    TrackingRuntime,
    WorkloadHandle,
)

__all__ = ["LaunchSpec", "Runtime", "RuntimeUnavailable", "TrackingRuntime", "WorkloadHandle"]
