"""The fragment of a Docker Engine ``POST /containers/create`` body that a merged config fills.

Bind mounts go to ``HostConfig.Mounts`` (structured, so paths holding ``:`` need no escaping),
device nodes to ``HostConfig.Devices``, CDI names to a ``DeviceRequests`` entry with driver
``cdi``; ``MemorySwap`` equals ``Memory`` so the limit cannot be dodged through swap. Extra
syscalls need a seccomp profile of the caller's choosing and are not rendered.
"""

from __future__ import annotations

from typing import Any

from accelkit.types import MountType, WorkloadConfig
from accelkit.workload.render.cpulist import format_cpu_list


def _host_config(config: WorkloadConfig) -> dict[str, Any]:
    host: dict[str, Any] = {}
    mounts = [
        {"Type": "bind", "Source": m.source, "Target": m.target, "ReadOnly": m.read_only}
        for m in config.mounts
        if m.type is MountType.BIND
    ]
    devices = [
        {
            "PathOnHost": m.source,
            "PathInContainer": m.target,
            "CgroupPermissions": "r" if m.read_only else "rwm",
        }
        for m in config.mounts
        if m.type is MountType.DEVICE
    ]
    if mounts:
        host["Mounts"] = mounts
    if devices:
        host["Devices"] = devices
    if config.extra_gids:
        host["GroupAdd"] = [str(gid) for gid in config.extra_gids]
    if config.cpuset_cpus is not None:
        host["CpusetCpus"] = format_cpu_list(config.cpuset_cpus)
    if config.cpuset_mems is not None:
        host["CpusetMems"] = format_cpu_list(config.cpuset_mems)
    if config.memory_limit is not None:
        host["Memory"] = config.memory_limit
        host["MemorySwap"] = config.memory_limit
    if config.cdi_devices:
        host["DeviceRequests"] = [{"Driver": "cdi", "DeviceIDs": list(config.cdi_devices)}]
    return host


def render_docker_create(config: WorkloadConfig) -> dict[str, Any]:
    """``Env``, ``HostConfig`` and ``NetworkingConfig`` keys; empty parts are left out."""
    body: dict[str, Any] = {}
    if config.env_vars:
        body["Env"] = [f"{name}={value}" for name, value in config.env_vars.items()]
    if host := _host_config(config):
        body["HostConfig"] = host
    if config.networks:
        body["NetworkingConfig"] = {"EndpointsConfig": {n: {} for n in config.networks}}
    return body
