"""accelkit: a compute-plugin framework for machines that run AI workloads.

Plugin authors need only what this package exports (:data:`hookimpl`,
:data:`PLUGIN_API_VERSION`) and the stable modules :mod:`accelkit.plugin`,
:mod:`accelkit.types`, :mod:`accelkit.errors`, :mod:`accelkit.hookspecs` and
:mod:`accelkit.testing`; see the stability policy in the documentation.
"""

from __future__ import annotations

from accelkit.__about__ import __version__
from accelkit.apiversion import PLUGIN_API_VERSION
from accelkit.hookspecs import hookimpl

__all__ = ["PLUGIN_API_VERSION", "__version__", "hookimpl"]
