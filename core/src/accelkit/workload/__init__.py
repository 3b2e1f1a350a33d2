"""Workloads: the lifecycle driver, config merging and the allocation ledger (§9).

The names below are imported when first used: a command that needs one module of this package
(the state directory's checks, say) does not import the ledger and the lifecycle with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.lazy import lazy_names

if TYPE_CHECKING:
    from accelkit.runtime.process_stamp import ProcessStamp
    from accelkit.workload.ledger import Ledger, LedgerScan, SetAside
    from accelkit.workload.lifecycle import HookTarget, LifecycleState, WorkloadLifecycle
    from accelkit.workload.merge import merge_configs
    from accelkit.workload.record import LedgerFormatError, LedgerRecord
    from accelkit.workload.validate import validate_config

#: each name, and the module of this package that defines it
_MODULE_OF = {
    "HookTarget": ".lifecycle",
    "Ledger": ".ledger",
    "LedgerFormatError": ".record",
    "LedgerRecord": ".record",
    "LedgerScan": ".ledger",
    "LifecycleState": ".lifecycle",
    "ProcessStamp": "accelkit.runtime.process_stamp",
    "SetAside": ".ledger",
    "WorkloadLifecycle": ".lifecycle",
    "merge_configs": ".merge",
    "validate_config": ".validate",
}

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


__getattr__ = lazy_names(__name__, _MODULE_OF)
