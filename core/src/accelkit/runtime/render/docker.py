"""The fragment of a Docker Engine ``POST /containers/create`` body that a merged config fills.

The body is fitted to the engine's API version (``GET /version`` → ``ApiVersion``):

- bind mounts go to ``HostConfig.Mounts`` (structured, so paths holding ``:`` need no escaping)
  and device nodes to ``HostConfig.Devices``, on every supported version;
- CDI names become a ``DeviceRequests`` entry with driver ``cdi`` only when the caller says the
  engine has CDI enabled **and** its API is 1.44 or later (Docker 25); elsewhere such a request
  makes the container fail to start ("could not select device driver"), so the device nodes in
  ``Devices`` are all the container gets;
- below API 1.44 the engine refuses more than one network at create time: the body names the
  first and :func:`docker_networks_to_connect` lists the rest, for ``POST /networks/{id}/connect``
  after the create.

``MemorySwap`` equals ``Memory`` so the limit cannot be dodged through swap. Extra syscalls need
a seccomp profile of the caller's choosing and are not rendered.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from accelkit.errors import WorkloadError
from accelkit.runtime.render.cpulist import format_cpu_list
from accelkit.types import MountType, WorkloadConfig

__all__ = [
    "CDI_MIN_API_VERSION",
    "DEFAULT_API_VERSION",
    "MIN_API_VERSION",
    "MULTI_NETWORK_MIN_API_VERSION",
    "DockerApiVersion",
    "docker_networks_to_connect",
    "render_docker_create",
]

_VERSION = re.compile(r"v?(\d{1,3})\.(\d{1,3})")


@attrs.frozen(order=True)
class DockerApiVersion:
    """A Docker Engine API version such as ``1.41``, ordered numerically (1.9 < 1.41)."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> DockerApiVersion:
        """``"1.41"`` or ``"v1.41"``; anything else is a :class:`WorkloadError`."""
        if not (match := _VERSION.fullmatch(text.strip())):
            msg = f"Docker API version must look like '1.41', got {text!r}"
            raise WorkloadError(msg)
        return cls(int(match[1]), int(match[2]))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


#: ``HostConfig.DeviceRequests`` exists from this version on; older engines are refused.
MIN_API_VERSION = DockerApiVersion(1, 40)
#: The API version assumed when the caller does not know the engine's (Docker 20.10).
DEFAULT_API_VERSION = DockerApiVersion(1, 41)
#: ``DeviceRequests`` with driver ``cdi`` (Docker 25, with CDI enabled in the daemon).
CDI_MIN_API_VERSION = DockerApiVersion(1, 44)
#: More than one ``NetworkingConfig.EndpointsConfig`` entry at create time.
MULTI_NETWORK_MIN_API_VERSION = DockerApiVersion(1, 44)


def _fitted(api_version: str | DockerApiVersion) -> DockerApiVersion:
    version = (
        api_version
        if isinstance(api_version, DockerApiVersion)
        else DockerApiVersion.parse(api_version)
    )
    if version < MIN_API_VERSION:
        msg = f"Docker API version {version} is older than the oldest supported, {MIN_API_VERSION}"
        raise WorkloadError(msg)
    return version


def _host_config(config: WorkloadConfig, *, use_cdi: bool) -> dict[str, Any]:
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
    if use_cdi and config.cdi_devices:
        host["DeviceRequests"] = [{"Driver": "cdi", "DeviceIDs": list(config.cdi_devices)}]
    return host


def render_docker_create(
    config: WorkloadConfig,
    *,
    api_version: str | DockerApiVersion = DEFAULT_API_VERSION,
    cdi: bool = False,
) -> dict[str, Any]:
    """``Env``, ``HostConfig`` and ``NetworkingConfig`` keys for an engine of ``api_version``.

    ``cdi`` says whether the engine resolves CDI device names (the daemon's ``cdi`` feature);
    it takes effect from API 1.44 on. Empty parts are left out. A malformed or unsupported
    version is a :class:`WorkloadError`.
    """
    version = _fitted(api_version)
    body: dict[str, Any] = {}
    if config.env_vars:
        body["Env"] = [f"{name}={value}" for name, value in config.env_vars.items()]
    if host := _host_config(config, use_cdi=cdi and version >= CDI_MIN_API_VERSION):
        body["HostConfig"] = host
    if config.networks:
        at_create = (
            config.networks if version >= MULTI_NETWORK_MIN_API_VERSION else config.networks[:1]
        )
        body["NetworkingConfig"] = {"EndpointsConfig": {n: {} for n in at_create}}
    return body


def docker_networks_to_connect(
    config: WorkloadConfig, *, api_version: str | DockerApiVersion = DEFAULT_API_VERSION
) -> tuple[str, ...]:
    """Networks the create body leaves out, to connect with ``POST /networks/{id}/connect``."""
    version = _fitted(api_version)
    if version >= MULTI_NETWORK_MIN_API_VERSION:
        return ()
    return config.networks[1:]
