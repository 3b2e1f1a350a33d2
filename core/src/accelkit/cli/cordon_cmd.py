"""``accelkit cordon`` / ``uncordon``: take a device out of (or back into) allocation.

The cordon is recorded in the state directory (``cordons.json``, synced), so every accelkit
process of the node honours it before its next booking. Both commands are idempotent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from accelkit.cli.options import config_option, echo_warnings, json_option, read_config
from accelkit.cli.output import print_json


async def _change(
    config_path: Path | None, plugin: str, device: str, reason: str | None, *, on: bool
) -> dict[str, Any]:
    from accelkit.node import Node

    async with Node.open(read_config(config_path)) as node:
        echo_warnings(node.host.loader.warnings)
        if on:
            changed = await node.health_keeper.cordon(plugin, device, reason or "")
        else:
            changed = await node.health_keeper.uncordon(plugin, device)
        health = node.health.of(plugin, device)
        return {
            "plugin": plugin,
            "device": device,
            "cordoned": on,
            "changed": changed,
            "health": {
                "state": health.state.value,
                "reason": health.reason,
                "since": str(health.since),
            },
        }


def _say(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(result)
        return
    name = f"{result['plugin']}/{result['device']}"
    if result["cordoned"]:
        verb = "cordoned" if result["changed"] else "was already cordoned"
    else:
        verb = "uncordoned" if result["changed"] else "was not cordoned"
    click.echo(f"{name} {verb}; health: {result['health']['state']}")


@click.command()
@config_option
@json_option
@click.option("--reason", default=None, help="Why (shown by 'accelkit status' and 'devices').")
@click.argument("plugin")
@click.argument("device")
def cordon(
    config_path: Path | None, as_json: bool, reason: str | None, plugin: str, device: str
) -> None:
    """Take DEVICE of PLUGIN out of allocation for every accelkit process of the node.

    Workloads that hold it keep running and are told (device_unhealthy); no new workload gets
    it until 'accelkit uncordon'. Cordoning a cordoned device changes nothing.
    """
    _say(asyncio.run(_change(config_path, plugin, device, reason, on=True)), as_json)


@click.command()
@config_option
@json_option
@click.argument("plugin")
@click.argument("device")
def uncordon(config_path: Path | None, as_json: bool, plugin: str, device: str) -> None:
    """Put DEVICE of PLUGIN back into allocation (if its plugin reports it healthy)."""
    _say(asyncio.run(_change(config_path, plugin, device, None, on=False)), as_json)
