"""``accelkit repartition``: give unassigned devices to agents in AUTO_SPLIT (DESIGN §15).

The new assignment is recorded in the state directory (``assignments.json``, synced), so every
later accelkit process of the node splits the devices the same way; ``accelkit serve`` follows
it at its next rediscovery.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from accelkit.cli.options import config_option, echo_warnings, json_option, read_config
from accelkit.cli.output import print_json


async def _repartition(config_path: Path | None) -> dict[str, Any]:
    from accelkit.node import Node
    from accelkit.node.repartition import repartition

    async with Node.open(read_config(config_path)) as node:
        echo_warnings(node.host.loader.warnings)
        return (await repartition(node)).to_json()


def _say(result: dict[str, Any]) -> None:
    from accelkit.cli.output import compact_ids

    for key, devices in result["given"].items():
        for device, agent in devices.items():
            click.echo(f"{key}/{device} given to {agent}")
    for key, devices in result["moved"].items():
        for device, (old, new) in devices.items():
            click.echo(f"{key}/{device} moved from {old} to {new} (free)")
    if not result["given"] and not result["moved"]:
        click.echo("nothing to change: every device is assigned and the split is even")
    for agent, plugins in result["agents"].items():
        listing = "; ".join(f"{k}: {compact_ids(ids)}" for k, ids in plugins.items())
        click.echo(f"{agent}: {listing}")


@click.command()
@config_option
@json_option
def repartition(config_path: Path | None, as_json: bool) -> None:
    """Give unassigned devices to agents (allocation-mode 'auto-split').

    Devices found by a rediscovery wait unassigned until this command gives them out. It aims
    at the even split a fresh start would compute, keeps devices with their agent where it
    can, and moves only free devices: a device a workload holds never moves (the command
    refuses instead). The result is recorded in the state directory for every process.
    """
    result = asyncio.run(_repartition(config_path))
    if as_json:
        print_json(result)
    else:
        _say(result)
