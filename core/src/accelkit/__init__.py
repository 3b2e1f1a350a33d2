"""accelkit: a compute-plugin framework for machines that run AI workloads."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from accelkit.hookspecs import hookimpl

try:
    __version__ = version("accelkit")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0"

__all__ = ["__version__", "hookimpl"]
