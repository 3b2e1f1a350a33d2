"""The node: one partition host, one ledger bookkeeper and the runtimes (DESIGN §9, §14).

The names below are imported when first used: ``accelkit plan`` and ``accelkit devices`` read
the health modules of this package and need neither the node nor its ledger and runtimes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.lazy import lazy_names

if TYPE_CHECKING:
    from accelkit.node.node import Node
    from accelkit.workload.status import ReleaseReport, WorkloadStatus

#: each name, and the module that defines it
_MODULE_OF = {
    "Node": "accelkit.node.node",
    "ReleaseReport": "accelkit.workload.status",
    "WorkloadStatus": "accelkit.workload.status",
}

__all__ = ["Node", "ReleaseReport", "WorkloadStatus"]


__getattr__ = lazy_names(__name__, _MODULE_OF)
