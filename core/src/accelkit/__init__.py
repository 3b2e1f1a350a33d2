"""accelkit: a compute-plugin framework for machines that run AI workloads.

Plugin distributions import only this package and the modules :mod:`accelkit.plugin`,
:mod:`accelkit.types`, :mod:`accelkit.health` and :mod:`accelkit.config` (and
:mod:`accelkit.testing` in their tests); an import-linter contract holds them to it. Beside
:data:`hookimpl` and :data:`PLUGIN_API_VERSION`, this package exports what a plugin needs from
the rest of accelkit: the errors it raises, the metric types it returns, the cgroup readers,
the alloc maps it may build on, and the size and device-id helpers. They are imported on first
use (:data:`hookimpl` and :data:`PLUGIN_API_VERSION` too), so ``import accelkit`` imports
nothing else: the ``accelkit`` command imports its dependencies under its own start-up rules
(:mod:`accelkit.cli`). See the stability policy in the documentation.
"""

from __future__ import annotations

import importlib

from accelkit.__about__ import __version__

#: ``typing.TYPE_CHECKING`` without importing :mod:`typing` (the command imports it later, with
#: the rest of its modules, under its start-up rules)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from accelkit.allocmap import (
        AbstractAllocMap,
        AffinityHint,
        AllocationStrategy,
        DiscretePropertyAllocMap,
    )
    from accelkit.apiversion import PLUGIN_API_VERSION
    from accelkit.cgroup import (
        CgroupDir,
        CgroupFS,
        WorkloadLocation,
        process_tree,
        round_process_tree,
    )
    from accelkit.errors import (
        AccelkitError,
        ConfigError,
        InvalidResourceArgument,
        PluginContractError,
        PluginError,
        PluginLoadError,
        PluginUnavailable,
        WorkloadCreationDenied,
    )
    from accelkit.hookspecs import hookimpl
    from accelkit.metrics import (
        Aggregate,
        Measurement,
        MetricContext,
        MetricType,
        NodeMetric,
        ProcessMetric,
        WorkloadMetric,
    )
    from accelkit.partition import natural_sort_key
    from accelkit.sizes import format_binary_size, parse_binary_size

#: what this package exports from other modules, by the module that defines it
_EXPORTS = {
    "accelkit.apiversion": ("PLUGIN_API_VERSION",),
    "accelkit.hookspecs": ("hookimpl",),
    "accelkit.allocmap": (
        "AbstractAllocMap",
        "AffinityHint",
        "AllocationStrategy",
        "DiscretePropertyAllocMap",
    ),
    "accelkit.cgroup": (
        "CgroupDir",
        "CgroupFS",
        "WorkloadLocation",
        "process_tree",
        "round_process_tree",
    ),
    "accelkit.errors": (
        "AccelkitError",
        "ConfigError",
        "InvalidResourceArgument",
        "PluginContractError",
        "PluginError",
        "PluginLoadError",
        "PluginUnavailable",
        "WorkloadCreationDenied",
    ),
    "accelkit.metrics": (
        "Aggregate",
        "Measurement",
        "MetricContext",
        "MetricType",
        "NodeMetric",
        "ProcessMetric",
        "WorkloadMetric",
    ),
    "accelkit.partition": ("natural_sort_key",),
    "accelkit.sizes": ("format_binary_size", "parse_binary_size"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "PLUGIN_API_VERSION",
    "AbstractAllocMap",
    "AccelkitError",
    "AffinityHint",
    "Aggregate",
    "AllocationStrategy",
    "CgroupDir",
    "CgroupFS",
    "ConfigError",
    "DiscretePropertyAllocMap",
    "InvalidResourceArgument",
    "Measurement",
    "MetricContext",
    "MetricType",
    "NodeMetric",
    "PluginContractError",
    "PluginError",
    "PluginLoadError",
    "PluginUnavailable",
    "ProcessMetric",
    "WorkloadCreationDenied",
    "WorkloadLocation",
    "WorkloadMetric",
    "__version__",
    "format_binary_size",
    "hookimpl",
    "natural_sort_key",
    "parse_binary_size",
    "process_tree",
    "round_process_tree",
]


def __getattr__(name: str) -> Any:
    """Import an exported name on first use (PEP 562)."""
    if (module := _MODULE_OF.get(name)) is None:
        msg = f"module 'accelkit' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
