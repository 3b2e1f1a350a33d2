"""``accelkit k8s-device-plugin``: serve an agent's devices to the kubelet (DESIGN §16).

A long-running process: it opens the node once, serves one device plugin (API v1beta1) per
extended resource on its own socket in the kubelet's device-plugins directory, registers them
on ``kubelet.sock`` and re-registers when the kubelet restarts, until SIGTERM or SIGINT. What
happens is printed one line per event (``--json``: one JSON object per line) on stdout.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import click

from accelkit.cli.options import (
    config_option,
    echo_warnings,
    given_path,
    json_option,
    pick_agent,
    read_config,
    until_signalled,
)
from accelkit.config.model import K8sBridgeConfig
from accelkit.config.rules import resource_domain
from accelkit.types import AgentId

_SAY: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "registered": lambda e: f"registered {e['resource']} (socket {e['endpoint']})",
    "serving": lambda e: f"serving agent {e['agent']}: {', '.join(e['resources'])}",
    "warning": lambda e: f"warning: {e['message']}",
    "released": lambda e: f"released {e['workload']} (no pod holds its devices)",
    "pod": lambda e: f"{e['workload']} is pod container {e['pod']}",
    "held": lambda e: str(e["message"]),
    "free": lambda e: str(e["message"]),
    "pod-resources": lambda e: f"asking the kubelet's PodResources API at {e['socket']}",
}


def _describe(event: Mapping[str, Any]) -> str:
    say = _SAY.get(str(event.get("event")))
    return say(event) if say is not None else json.dumps(event)


async def _serve(
    config_path: Path | None,
    agent: str | None,
    kubelet_dir: Path | None,
    domain: str | None,
    as_json: bool,
) -> None:
    from accelkit.bridge.k8s.bridge import K8sBridge
    from accelkit.node import Node

    config = read_config(config_path)
    settings = config.bridge.k8s or K8sBridgeConfig()
    if kubelet_dir is not None:
        settings = attrs.evolve(settings, kubelet_dir=kubelet_dir)
    if domain is not None:
        settings = attrs.evolve(settings, domain=domain)

    def echo(event: Mapping[str, Any]) -> None:
        text = (
            json.dumps(dict(event), sort_keys=True) if as_json else f"accelkit: {_describe(event)}"
        )
        click.echo(text)

    async with Node.open(config) as node:
        echo_warnings(node.host.loader.warnings)
        agent = pick_agent(agent, node.agents)
        bridge = K8sBridge(node, AgentId(agent), settings, echo)
        echo({"event": "serving", "agent": agent, "resources": [r.name for r in bridge.resources]})
        await until_signalled(bridge.run())


@click.command("k8s-device-plugin")
@config_option
@click.option(
    "--agent", default=None, help="The agent whose devices to serve (default: the only one)."
)
@click.option(
    "--kubelet-dir",
    type=click.Path(file_okay=False),
    callback=given_path,
    default=None,
    help="The kubelet's device-plugins directory (default: [bridge.k8s] kubelet-dir, "
    "/var/lib/kubelet/device-plugins).",
)
@click.option(
    "--domain",
    default=None,
    help="Extended resources are named DOMAIN/SLOT (default: [bridge.k8s] domain, accelkit.io).",
)
@json_option
def k8s_device_plugin(
    config_path: Path | None,
    agent: str | None,
    kubelet_dir: Path | None,
    domain: str | None,
    as_json: bool,
) -> None:
    """Serve an agent's devices to the kubelet as device plugins (API v1beta1).

    One device plugin per whole-device slot (accelkit.io/cuda.device, MIG-like profiles as
    their own resources), registered on kubelet.sock and again whenever the kubelet restarts.
    Allocate books the devices in the ledger and runs the plugins' pre_create; a booking is
    freed once the kubelet's PodResources API no longer lists its devices. Runs until SIGTERM.
    """
    if domain is not None:
        try:
            resource_domain(domain)  # what [bridge.k8s] domain accepts
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--domain") from exc
    asyncio.run(_serve(config_path, agent, kubelet_dir, domain, as_json))
