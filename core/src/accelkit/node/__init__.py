"""The node: one partition host, one ledger bookkeeper and the runtimes (DESIGN §9, §14)."""

from __future__ import annotations

from accelkit.node.node import Node
from accelkit.workload.status import ReleaseReport, WorkloadStatus

__all__ = ["Node", "ReleaseReport", "WorkloadStatus"]
