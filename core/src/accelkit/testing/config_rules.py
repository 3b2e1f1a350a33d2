"""What makes a :class:`~accelkit.types.WorkloadConfig` from a lifecycle hook valid.

The kit applies the runtime's own rule set (:mod:`accelkit.workload.validate`), so a config
that passes here is one the runtime accepts, and the reverse.
"""

from __future__ import annotations

from accelkit.workload.validate import config_problems

__all__ = ["config_problems"]
