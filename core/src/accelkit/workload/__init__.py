"""Workloads: the lifecycle driver, config merging, renderers and the allocation ledger (§9)."""

from __future__ import annotations

from accelkit.workload.ledger import Ledger, LedgerScan, SetAside
from accelkit.workload.lifecycle import HookTarget, LifecycleState, WorkloadLifecycle
from accelkit.workload.liveness import ProcessStamp
from accelkit.workload.merge import merge_configs
from accelkit.workload.record import LedgerFormatError, LedgerRecord
from accelkit.workload.validate import validate_config

__all__ = [
    "HookTarget",
    "Ledger",
    "LedgerFormatError",
    "LedgerRecord",
    "LedgerScan",
    "LifecycleState",
    "ProcessStamp",
    "SetAside",
    "WorkloadLifecycle",
    "merge_configs",
    "validate_config",
]
