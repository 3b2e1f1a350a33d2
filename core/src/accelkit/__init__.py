"""accelkit: a compute-plugin framework for machines that run AI workloads."""

from __future__ import annotations

from accelkit.hookspecs import hookimpl

__all__ = ["__version__", "hookimpl"]


def __getattr__(name: str) -> str:
    # the version is read from package metadata only when asked for: importing
    # importlib.metadata costs start-up time on every `accelkit` command
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("accelkit")
        except PackageNotFoundError:  # running from a source tree without installing
            return "0.0.0"
    msg = f"module 'accelkit' has no attribute {name!r}"
    raise AttributeError(msg)
