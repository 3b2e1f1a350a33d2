"""Renderers: a merged :class:`~accelkit.types.WorkloadConfig` turned into what one target needs.

Each renderer is a pure function of the config (and, where the target needs it, the allocation):
a local process tree (:mod:`.process`), a Docker Engine create body (:mod:`.docker`), a CDI spec
(:mod:`.cdi`) and ``resource.txt`` lines (:mod:`.resource_txt`).
"""

from __future__ import annotations

from accelkit.workload.render.cdi import (
    CDI_VERSIONS,
    cdi_container_edits,
    minimum_cdi_version,
    render_cdi_spec,
)
from accelkit.workload.render.cpulist import format_cpu_list
from accelkit.workload.render.docker import (
    DockerApiVersion,
    docker_networks_to_connect,
    render_docker_create,
)
from accelkit.workload.render.process import ProcessPlan, render_process
from accelkit.workload.render.resource_txt import parse_resource_txt, render_resource_txt

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
