"""The hooks a plugin distribution implements (pluggy project ``accelkit``).

A distribution declares ``[project.entry-points.accelkit] NAME = "module"`` and that module
implements the hooks below, marked with :data:`accelkit.hookimpl`. Hooks evolve by gaining
arguments only, so an implementation may accept fewer arguments than its spec.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from accelkit.events import WorkloadEvent
    from accelkit.plugin import AbstractComputePlugin

__all__ = [
    "PROJECT_NAME",
    "accelkit_bridges",
    "accelkit_compute_plugins",
    "accelkit_runtimes",
    "accelkit_workload_event",
    "hookimpl",
]

PROJECT_NAME = "accelkit"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def accelkit_compute_plugins(config: Mapping[str, Any]) -> Sequence[AbstractComputePlugin]:
    """Return this distribution's compute plugins, built from its host-config section.

    ``config`` is ``[plugins.config.NAME]`` of the host config (empty when absent), NAME being the
    entry-point name. Most distributions return one plugin; one may return several, each with
    its own ``key`` (the mock distribution returns one per declared device kind). Raise
    ``PluginUnavailable`` when the hardware is absent; any other exception marks the
    distribution ``failed`` and leaves the others working. It runs in a thread of its own under
    ``[plugins] call-timeout``; every later call into the plugins it returns runs on each
    plugin's own worker (see :mod:`accelkit.calls`).
    """
    raise NotImplementedError


@hookspec
def accelkit_workload_event(event: WorkloadEvent) -> None:
    """Observe a lifecycle step of any workload on the node (for vendor device managers).

    Called after each phase completes, on a thread of the distribution's own, for at most
    ``[plugins] call-timeout`` seconds; an exception is logged and never stops the workload. An
    observer that does not return in time is left behind and not called again in the process.
    """


@hookspec
def accelkit_runtimes() -> Sequence[type]:
    """Return the runtime classes this distribution adds (subclasses of
    ``accelkit.runtime.Runtime``, named here by their module alone so that the plugin surface
    never imports the runtime layer).

    Each class has a unique ``name`` (recorded in the ledger, given to ``accelkit run
    --runtime``) and is built with no arguments when a node opens; it connects to nothing
    until first used. A distribution may implement this hook alone. accelkit's own runtimes
    are registered through this hook too; a name already taken is refused, naming both.
    """
    raise NotImplementedError


@hookspec
def accelkit_bridges() -> Sequence[type]:
    """Return the bridge classes this distribution adds (subclasses of
    ``accelkit.bridge.Bridge``), each one ``accelkit NAME`` command serving a cluster scheduler.

    Each class has a unique ``name`` (the command's) and gives its click command when that
    command runs. A distribution may implement this hook alone. accelkit's own bridges
    (``k8s-device-plugin``, ``dra-driver``, ``slurm``) are registered through this hook too; a
    name already taken, by a bridge or an accelkit command, is refused, naming both.
    """
    raise NotImplementedError
