"""The node: one partition host, one ledger bookkeeper and the runtimes (DESIGN §9, §14).

The names below are imported when first used: ``accelkit plan`` and ``accelkit devices`` read
the health modules of this package and need neither the node nor its ledger and runtimes.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(import_module(module), name)
