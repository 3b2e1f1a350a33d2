"""Renderers: a merged :class:`~accelkit.types.WorkloadConfig` turned into what one target needs.

Each renderer is a pure function of the config (and, where the target needs it, the allocation):
a local process tree (:mod:`.process`), a Docker Engine create body (:mod:`.docker`), a CDI spec
(:mod:`.cdi`) and ``resource.txt`` lines (:mod:`.resource_txt`).

The names below are imported from their module on first use: a process run, which needs only
:mod:`.process`, never builds the classes of the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelkit.runtime.render.cdi import (
        CDI_VERSIONS,
        cdi_container_edits,
        minimum_cdi_version,
        render_cdi_spec,
    )
    from accelkit.runtime.render.cpulist import format_cpu_list
    from accelkit.runtime.render.docker import (
        DockerApiVersion,
        docker_networks_to_connect,
        render_docker_create,
    )
    from accelkit.runtime.render.process import ProcessPlan, render_process
    from accelkit.runtime.render.resource_txt import parse_resource_txt, render_resource_txt

#: each exported name -> the module that defines it
_HOMES = {
    "CDI_VERSIONS": "cdi",
    "cdi_container_edits": "cdi",
    "minimum_cdi_version": "cdi",
    "render_cdi_spec": "cdi",
    "format_cpu_list": "cpulist",
    "DockerApiVersion": "docker",
    "docker_networks_to_connect": "docker",
    "render_docker_create": "docker",
    "ProcessPlan": "process",
    "render_process": "process",
    "parse_resource_txt": "resource_txt",
    "render_resource_txt": "resource_txt",
}

__all__ = [
    "CDI_VERSIONS",
    "DockerApiVersion",
    "ProcessPlan",
    "cdi_container_edits",
    "docker_networks_to_connect",
    "format_cpu_list",
    "minimum_cdi_version",
    "parse_resource_txt",
    "render_cdi_spec",
    "render_docker_create",
    "render_process",
    "render_resource_txt",
]


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # later lookups are plain
    return value
