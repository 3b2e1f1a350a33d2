"""What accelkit asks the engine for: a container's name, labels and create body.

The body is the renderer's (:func:`accelkit.runtime.render.docker.render_docker_create`, fitted
to the engine's API version and CDI support) plus the image, the command and accelkit's labels.
Where the engine has no CDI support the config's DEVICE mounts are all the container gets, so
CDI devices without device nodes are refused; below API 1.44 the networks after the first are
connected right after the create.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from accelkit.errors import WorkloadError
from accelkit.runtime.base import LaunchSpec
from accelkit.runtime.docker_names import (
    DEFAULT_DOCKER_HOST,
    LABEL_AGENT,
    LABEL_LEDGER,
    LABEL_LEDGER_KEY,
    LABEL_WORKLOAD,
    container_name,
    docker_host,
)
from accelkit.runtime.render.docker import (
    MIN_API_VERSION,
    DockerApiVersion,
    docker_networks_to_connect,
    render_docker_create,
)
from accelkit.types import MountType

__all__ = [
    "DEFAULT_DOCKER_HOST",
    "LABEL_AGENT",
    "LABEL_LEDGER",
    "LABEL_LEDGER_KEY",
    "LABEL_WORKLOAD",
    "CreatePlan",
    "EngineFacts",
    "container_name",
    "docker_host",
    "plan_create",
]


@attrs.frozen
class EngineFacts:
    """What the engine told us about itself; the create body is fitted to it."""

    api_version: DockerApiVersion
    #: the engine resolves CDI device requests (it reports CDI spec directories)
    cdi: bool
    #: ``Docker Engine 20.10.24``, ``Podman Engine 4.3.1``: for messages and ``-v``
    product: str

    @classmethod
    def from_engine(cls, version: Mapping[str, Any], info: Mapping[str, Any]) -> EngineFacts:
        """Build from the answers to ``GET /version`` and ``GET /info``."""
        api = DockerApiVersion.parse(str(version.get("ApiVersion", "")))
        components = version.get("Components") or []
        product = next(
            (
                f"{c.get('Name')} {c.get('Version')}"
                for c in components
                if "Engine" in str(c.get("Name"))
            ),
            f"Docker Engine {version.get('Version', '?')}",
        )
        return cls(api_version=api, cdi=bool(info.get("CDISpecDirs")), product=product)

    @property
    def supported(self) -> bool:
        """Whether accelkit can drive this engine (API 1.40 or later)."""
        return self.api_version >= MIN_API_VERSION


@attrs.frozen
class CreatePlan:
    """The create body and the networks to connect after creation (old engines)."""

    body: dict[str, Any]
    later_networks: tuple[str, ...] = ()


def _labels(spec: LaunchSpec) -> dict[str, str]:
    labels = {
        LABEL_AGENT: spec.agent_id,
        LABEL_WORKLOAD: spec.workload.id,
        LABEL_LEDGER_KEY: spec.ledger_key,
    }
    if spec.ledger_id:  # a container without it is never taken for an orphan
        labels[LABEL_LEDGER] = spec.ledger_id
    return labels


def _check_devices(spec: LaunchSpec, facts: EngineFacts) -> None:
    if not spec.config.cdi_devices or facts.cdi:
        return
    if not any(m.type is MountType.DEVICE for m in spec.config.mounts):
        names = ", ".join(spec.config.cdi_devices)
        msg = (
            f"the engine ({facts.product}) has no CDI support and the workload's config "
            f"names no device nodes for the CDI devices {names}; enable CDI in the engine"
        )
        raise WorkloadError(msg)


def plan_create(spec: LaunchSpec, facts: EngineFacts) -> CreatePlan:
    """The create body for ``spec`` on an engine described by ``facts``.

    The container's environment is the image's plus the hooks' ``env_vars``; accelkit's own
    environment (``spec.base_env``) belongs to process trees and is not copied in.
    """
    if not spec.image:
        msg = "the docker runtime needs an image (accelkit run --runtime docker --image IMAGE)"
        raise WorkloadError(msg)
    _check_devices(spec, facts)
    body = render_docker_create(spec.config, api_version=facts.api_version, cdi=facts.cdi)
    body.update(
        Image=spec.image,
        Labels=_labels(spec),
        AttachStdout=True,
        AttachStderr=True,
        Tty=False,
        OpenStdin=False,
    )
    if spec.argv:
        body["Cmd"] = list(spec.argv)
    if spec.config.networks:
        body.setdefault("HostConfig", {})["NetworkMode"] = spec.config.networks[0]
    later = docker_networks_to_connect(spec.config, api_version=facts.api_version)
    return CreatePlan(body, later)
