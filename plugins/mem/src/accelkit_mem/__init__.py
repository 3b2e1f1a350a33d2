"""Memory as an accelkit device: the ``mem`` plugin (entry point ``mem = "accelkit_mem"``).

Importing this module is cheap; the plugin reads RAM and cgroup limits only in ``init()`` and
``list_devices()``. Host config, ``[plugins.config.mem]``::

    overcommit-factor = "1.5"   # the mem slot offers this many times the usable memory, 1 to 10

Workload metrics locate a workload by its id: ``"cgroup:<path>"`` reads that cgroup's memory
charge less its inactive page cache, ``"pid:<n>"`` (or ``"<n>"``) sums the resident sets of
process ``n`` and its descendants; see :class:`accelkit.cgroup.WorkloadLocation`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from accelkit import hookimpl

if TYPE_CHECKING:
    from accelkit.plugin import AbstractComputePlugin
    from accelkit_mem.plugin import MemPlugin


@hookimpl
def accelkit_compute_plugins(config: Mapping[str, Any]) -> Sequence[AbstractComputePlugin]:
    """The ``mem`` plugin, configured from ``[plugins.config.mem]``."""
    from accelkit_mem.plugin import MemPlugin

    return [MemPlugin(config)]


def __getattr__(name: str) -> type[MemPlugin]:
    if name == "MemPlugin":
        from accelkit_mem.plugin import MemPlugin

        return MemPlugin
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


__all__ = ["MemPlugin", "accelkit_compute_plugins"]
