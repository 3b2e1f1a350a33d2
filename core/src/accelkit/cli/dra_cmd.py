"""``accelkit dra-driver``: serve an agent's devices to Kubernetes as a DRA driver (DESIGN §18).

A long-running process, one per node (a DaemonSet): it opens the node once, publishes the
agent's devices as the node's ResourceSlices through the API server, registers with the
kubelet's plugin watcher and prepares the claims the scheduler allocated, until SIGTERM or
SIGINT. What happens is printed one line per event (``--json``: one JSON object per line).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import click

from accelkit.cli.options import (
    Seconds,
    config_option,
    echo_warnings,
    given_path,
    json_option,
    pick_agent,
    read_config,
    until_signalled,
)
from accelkit.types import AgentId

DEFAULTS = {
    "registry": Path("/var/lib/kubelet/plugins_registry"),
    "plugins": Path("/var/lib/kubelet/plugins"),
    "cdi": Path("/var/run/cdi"),
}
_DNS_SUBDOMAIN = 253


_TEMPLATES = {
    "warning": "warning: {message}",
    "driver": "driver {driver} for agent {agent} on node {node}: {devices} devices",
    "api-server": "API server at {host}",
    "serving": "serving the kubelet's plugin watcher on {socket}",
    "registered": "registered with the kubelet as DRA driver {driver}",
    "published": "published the ResourceSlices, generation {generation}",
    "released": "released {workload} (its claim is gone)",
}


def _describe(event: Mapping[str, Any]) -> str:
    template = _TEMPLATES.get(str(event.get("event")))
    if template is None:
        return json.dumps(dict(event), sort_keys=True)
    return template.format(**event)


def _kubeconfig(given: str | None) -> str:
    from accelkit.runtime.k8s_claims import IN_CLUSTER

    if given:
        return given
    if os.environ.get("KUBECONFIG"):
        return os.environ["KUBECONFIG"].split(os.pathsep)[0]
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return IN_CLUSTER
    return str(Path.home() / ".kube" / "config")


async def _serve(config_path: Path | None, agent: str | None, settings: Any, as_json: bool) -> None:
    from accelkit.bridge.dra.driver import DraDriver
    from accelkit.node import Node

    config = read_config(config_path)

    def echo(event: Mapping[str, Any]) -> None:
        text = (
            json.dumps(dict(event), sort_keys=True) if as_json else f"accelkit: {_describe(event)}"
        )
        click.echo(text)

    async with Node.open(config) as node:
        echo_warnings(node.host.loader.warnings)
        agent = pick_agent(agent, node.agents)
        from kubernetes.config import ConfigException
        from yaml import YAMLError  # type: ignore[import-untyped]  # the client's parser

        try:
            driver = DraDriver(node, AgentId(agent), settings, echo)
        except (OSError, ConfigException, YAMLError) as exc:  # none, no token, not YAML
            said = " ".join(str(exc).split())  # a YAML error spans lines
            msg = f"cannot read the API server's credentials ({settings.kubeconfig}): {said}"
            raise click.ClickException(msg) from None
        echo(
            {
                "event": "driver",
                "driver": settings.driver,
                "agent": agent,
                "node": settings.node_name,
                "devices": len(driver.devices()),
            }
        )
        await until_signalled(driver.run())


def _is_dns_subdomain(name: str) -> bool:
    from accelkit.bridge.dra.devices import dns_label

    parts = name.split(".")
    return len(name) <= _DNS_SUBDOMAIN and all(p and dns_label(p) == p for p in parts)


def _dns_subdomain(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--node-name``: a Kubernetes node name, a DNS subdomain (``node-1``, ``n1.example``)."""
    if value is not None and not _is_dns_subdomain(value):
        msg = f"{value!r} is not a Kubernetes node name (a lower-case DNS subdomain)"
        raise click.BadParameter(msg, param=param)
    return value


def _node_from_environment() -> str | None:
    """``NODE_NAME`` (a DaemonSet sets it from ``spec.nodeName``), checked as ``--node-name``."""
    if (name := os.environ.get("NODE_NAME")) is None:
        return None
    if not _is_dns_subdomain(name):
        msg = f"NODE_NAME={name!r} is not a Kubernetes node name (a lower-case DNS subdomain)"
        raise click.UsageError(msg)
    return name


def _not_empty(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        msg = "empty path: name a kubeconfig file, or leave the option out"
        raise click.BadParameter(msg, param=param)
    return value


@click.command("dra-driver")
@config_option
@click.option(
    "--agent", default=None, help="The agent whose devices to serve (default: the only one)."
)
@click.option(
    "--driver",
    "driver_name",
    default="accelkit.io",
    show_default=True,
    help="The DRA driver name (DeviceClasses select devices with device.driver).",
)
@click.option(
    "--node-name",
    default=None,
    callback=_dns_subdomain,
    help="The Kubernetes node (default: $NODE_NAME, else the host name).",
)
@click.option(
    "--kubeconfig",
    default=None,
    callback=_not_empty,
    help="How to reach the API server (default: $KUBECONFIG, the pod's service account "
    "inside a cluster, else ~/.kube/config).",
)
@click.option(
    "--registry-dir",
    type=click.Path(file_okay=False),
    callback=given_path,
    default=str(DEFAULTS["registry"]),
    show_default=True,
    help="The kubelet's plugin registry directory.",
)
@click.option(
    "--plugins-dir",
    type=click.Path(file_okay=False),
    callback=given_path,
    default=str(DEFAULTS["plugins"]),
    show_default=True,
    help="The kubelet's plugins directory (the driver's socket goes in DRIVER/dra.sock).",
)
@click.option(
    "--cdi-dir",
    type=click.Path(file_okay=False),
    callback=given_path,
    default=str(DEFAULTS["cdi"]),
    show_default=True,
    help="Where the claims' CDI specs are written.",
)
@click.option(
    "--interval",
    type=Seconds(),
    default=5.0,
    show_default=True,
    metavar="S",
    help="Seconds between two reconciliations (claims gone, health, sockets).",
)
@json_option
def dra_driver(  # noqa: PLR0917 (click passes one argument per option)
    config_path: Path | None,
    agent: str | None,
    driver_name: str,
    node_name: str | None,
    kubeconfig: str | None,
    registry_dir: Path,
    plugins_dir: Path,
    cdi_dir: Path,
    interval: float,
    as_json: bool,
) -> None:
    """Serve an agent's devices to Kubernetes as a DRA driver (resource.k8s.io/v1).

    Publishes the devices as the node's ResourceSlices (shares as consumable capacity, MIG
    instances as partitionable devices, unhealthy or cordoned devices tainted NoSchedule),
    registers with the kubelet (v1.DRAPlugin), books each prepared claim in the ledger and
    writes its CDI spec; a booking is freed when its claim is unprepared or gone. Runs until
    SIGTERM.
    """
    from accelkit.bridge.dra.driver import DraSettings

    if "." not in driver_name or not _is_dns_subdomain(driver_name):
        msg = f"{driver_name!r} is not a DNS subdomain with a dot (e.g. accelkit.io)"
        raise click.BadParameter(msg, param_hint="--driver")
    node = node_name or _node_from_environment() or socket.gethostname()
    settings = DraSettings(
        node_name=node,
        kubeconfig=_kubeconfig(kubeconfig),
        driver=driver_name,
        registry_dir=registry_dir,
        plugins_dir=plugins_dir,
        cdi_dir=cdi_dir,
        interval=Decimal(str(interval)),
    )
    asyncio.run(_serve(config_path, agent, settings, as_json))
