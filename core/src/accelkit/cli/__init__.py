"""The ``accelkit`` command."""

from __future__ import annotations

from accelkit.cli.app import cli, main

__all__ = ["cli", "main"]
