"""The names accelkit gives on a Docker engine: the engine's address, containers, labels.

Kept apart from the create body (:mod:`accelkit.runtime.docker_body`, which needs the renderers)
so that building the runtimes, which every ``accelkit`` command that opens a node does, imports
nothing of the container machinery.
"""

from __future__ import annotations

import os
import re
import uuid

from accelkit.types import AgentId

__all__ = [
    "DEFAULT_DOCKER_HOST",
    "LABEL_AGENT",
    "LABEL_LEDGER",
    "LABEL_LEDGER_KEY",
    "LABEL_WORKLOAD",
    "container_name",
    "docker_host",
]

#: where the engine listens when ``DOCKER_HOST`` is not set
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"

LABEL_AGENT = "io.accelkit.agent"
LABEL_WORKLOAD = "io.accelkit.workload"
LABEL_LEDGER_KEY = "io.accelkit.ledger-key"
#: the identity of the ledger that books the container (the orphan sweep lists by it)
LABEL_LEDGER = "io.accelkit.ledger"

#: what the engine accepts as a name after the ``accelkit-`` prefix: ``[a-zA-Z0-9][a-zA-Z0-9_.-]+``
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_.-]+")
_AGENT_PART_MAX = 40


def docker_host(url: str | None = None) -> str:
    """The engine's address: ``url``, else ``DOCKER_HOST``, else the default socket."""
    return url or os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST


def container_name(agent_id: AgentId) -> str:
    """``accelkit-<agent>-<12 hex digits>``: a valid, fresh container name for any agent id."""
    agent = _NOT_NAME.sub("-", agent_id).strip("-.")[:_AGENT_PART_MAX].strip("-.")
    suffix = uuid.uuid4().hex[:12]
    return f"accelkit-{agent}-{suffix}" if agent else f"accelkit-{suffix}"
