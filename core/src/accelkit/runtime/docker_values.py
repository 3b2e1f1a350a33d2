"""The docker runtime's value types: where output goes, how a container ended, what is listed.

They import nothing of the engine client, so that naming the docker runtime costs nothing
until it is used.
"""

from __future__ import annotations

import sys
from typing import BinaryIO

import attrs

from accelkit.runtime.base import WorkloadHandle

__all__ = ["ALIVE_STATES", "TERMINAL", "ContainerExit", "ContainerRecord", "OutputTarget"]

#: the states in which a container still holds what it was given
ALIVE_STATES = frozenset({"running", "restarting", "paused"})
_STDERR = 2


@attrs.frozen
class OutputTarget:
    """Where a container's two streams go; ``None`` means our own stdout and stderr."""

    stdout: BinaryIO | None = None
    stderr: BinaryIO | None = None

    def stream(self, fileno: int) -> BinaryIO:
        """The file for the container's stream ``fileno`` (1 stdout, 2 stderr)."""
        if fileno == _STDERR:
            return self.stderr or sys.stderr.buffer
        return self.stdout or sys.stdout.buffer


#: the containers' output goes to our own stdout and stderr
TERMINAL = OutputTarget()


@attrs.frozen
class ContainerExit:
    """How a container ended: its exit status and whether the kernel killed it for memory."""

    status: int
    oom_killed: bool = False
    error: str = ""


@attrs.frozen
class ContainerRecord:
    """A container accelkit made, as the engine lists it (reconciliation reads these)."""

    id: str
    name: str
    agent_id: str
    workload_id: str
    ledger_key: str
    state: str
    engine: str
    #: the ``io.accelkit.ledger`` label ("" on containers made before it existed)
    ledger_id: str = ""
    #: when the engine created it (epoch seconds, the engine's clock; 0 when it did not say)
    created: float = 0.0

    @property
    def alive(self) -> bool:
        """Whether it still runs (and so still holds its devices)."""
        return self.state in ALIVE_STATES

    def handle(self) -> WorkloadHandle:
        """The handle the docker runtime's ``create`` returned for it."""
        return WorkloadHandle("docker", self.id, {"name": self.name, "engine": self.engine})
