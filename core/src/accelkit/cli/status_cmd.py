"""``accelkit status``: the workloads of the node's ledger, after a full reconciliation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from accelkit.cli.options import config_option, echo_warnings, json_option, read_config
from accelkit.workload.status import WorkloadStatus


async def _status(config_path: Path | None) -> tuple[list[WorkloadStatus], list[str]]:
    from accelkit.node import Node

    async with Node.open(read_config(config_path)) as node:
        echo_warnings(node.host.loader.warnings)
        found = await node.status()
        return found, node.last_report.messages()


def _age(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


@click.command()
@config_option
@json_option
def status(config_path: Path | None, as_json: bool) -> None:
    """The node's workloads: agent, workload id, runtime, devices, phase, age, liveness and
    unfinished teardowns.

    Opening the node reconciles the ledger first: dead workloads are torn down and freed, and
    what that found is printed on stderr.
    """
    found, findings = asyncio.run(_status(config_path))
    for line in findings:
        click.echo(f"warning: {line}", err=True)
    if as_json:
        click.echo(json.dumps([s.to_json() for s in found], indent=2))
        return
    from accelkit.cli.output import print_table

    rows = [
        [
            s.agent,
            s.workload_id,
            s.runtime or s.workload_type,
            "; ".join(f"{plugin}: {','.join(ids) or '-'}" for plugin, ids in s.devices.items()),
            s.phase,
            _age(s.age_s),
            s.liveness,
            ", ".join(s.unfinished) or "-",
        ]
        for s in found
    ]
    print_table(
        "Workloads",
        ["agent", "workload", "runtime", "devices", "phase", "age", "liveness", "unfinished"],
        rows,
    )
