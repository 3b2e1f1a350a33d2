"""What a bridge to a cluster scheduler is to accelkit: one ``accelkit NAME`` command.

Bridges are an extension point like runtimes: a distribution of the ``accelkit`` entry-point
group implements ``accelkit_bridges()`` returning :class:`Bridge` subclasses, and accelkit's
own are registered through the same hook (:mod:`accelkit.cli.bridges`), so ``accelkit --help``
and ``accelkit plugins`` list what is installed, not a fixed set.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import click

__all__ = ["Bridge"]


class Bridge(ABC):
    """A bridge: its command's ``name``, a one-line ``summary``, and the command itself."""

    #: the command: ``accelkit NAME``; unique among bridges and accelkit's own commands
    name: ClassVar[str]
    #: what it serves, one line (``accelkit plugins``)
    summary: ClassVar[str] = ""

    @classmethod
    @abstractmethod
    def command(cls) -> click.Command:
        """The click command ``accelkit NAME`` runs; asked only when that command is used, so
        import what it needs here rather than at module level."""
