"""CPU cores as accelkit devices: the ``cpu`` plugin (entry point ``cpu = "accelkit_cpu"``).

Importing this module is cheap; the plugin reads cgroups, sysfs and procfs only in ``init()`` and
``list_devices()``. Host config, ``[plugins.config.cpu]``::

    overcommit-factor = 2   # cpu slots offered per core, 1 to 10 (default 1)

Workload metrics locate a workload by its id: ``"cgroup:<path>"`` reads that cgroup's CPU
accounting (v1 ``cpuacct.usage``, v2 ``cpu.stat``), ``"pid:<n>"`` (or ``"<n>"``) sums the CPU
time of process ``n`` and its descendants; see :class:`accelkit.cgroup.WorkloadLocation`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from accelkit import hookimpl

if TYPE_CHECKING:
    from accelkit.plugin import AbstractComputePlugin
    from accelkit_cpu.plugin import CPUPlugin


@hookimpl
def accelkit_compute_plugins(config: Mapping[str, Any]) -> Sequence[AbstractComputePlugin]:
    """The ``cpu`` plugin, configured from ``[plugins.config.cpu]``."""
    from accelkit_cpu.plugin import CPUPlugin

    return [CPUPlugin(config)]


def __getattr__(name: str) -> type[CPUPlugin]:
    if name == "CPUPlugin":
        from accelkit_cpu.plugin import CPUPlugin

        return CPUPlugin
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


__all__ = ["CPUPlugin", "accelkit_compute_plugins"]
