"""``accelkit status``: the workloads of the node's ledger, after a full reconciliation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from accelkit.cli.options import config_option, echo_warnings, json_option, read_config
from accelkit.health import DeviceHealth
from accelkit.types import DeviceId, DeviceName
from accelkit.workload.status import WorkloadStatus

Health = Mapping[DeviceName, Mapping[DeviceId, DeviceHealth]]


async def _status(config_path: Path | None) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    from accelkit.node import Node
    from accelkit.node.health_notes import read_notes

    async with Node.open(read_config(config_path)) as node:
        echo_warnings(node.host.loader.warnings)
        opened = node.last_report.messages()  # what opening found: orphans removed, say
        found = await node.status()
        notes = read_notes(node.bookkeeper.ledger)
        health = node.health.snapshot()
        rows = [_row(s, health, notes.get((s.agent, s.workload_id), [])) for s in found]
        cordons = [
            f"{plugin}/{device}: {cordon.reason or '(no reason given)'}"
            for (plugin, device), cordon in sorted(node.health.cordons().items())
        ]
        return rows, cordons, list(dict.fromkeys([*opened, *node.last_report.messages()]))


def _row(status: WorkloadStatus, health: Health, notes: list[Any]) -> dict[str, Any]:
    """One workload as ``status --json`` prints it: the ledger's view, health and notes."""
    from accelkit.node.health_view import health_json

    row = status.to_json()
    row["health"] = {
        plugin: {
            device: health_json(health[plugin][device])
            for device in ids
            if device in health.get(plugin, {})
        }
        for plugin, ids in status.devices.items()
    }
    row["notes"] = [note.to_json() for note in notes]
    return row


def _age(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def _health_lines(row: dict[str, Any]) -> list[str]:
    """Below the table: each device of the workload that is not healthy, then its notes."""
    who = f"{row['workload']} ({row['agent']})"
    lines = [
        f"health: {who}: {plugin}/{device} is {h['state']}"
        + (f" ({h['reason']})" if h["reason"] else "")
        for plugin, devices in row["health"].items()
        for device, h in devices.items()
        if h["state"] != "healthy"
    ]
    return lines + [f"note: {who}: {note['text']}" for note in row["notes"]]


@click.command()
@config_option
@json_option
def status(config_path: Path | None, as_json: bool) -> None:
    """The node's workloads: agent, workload id, runtime, devices, phase, age, liveness,
    unfinished teardowns, the health of their devices and what happened to it; then the
    cordoned devices.

    Opening the node reconciles the ledger first: dead workloads are torn down and freed,
    containers of this ledger that no record names are removed, and what that found is
    printed on stderr.
    """
    found, cordons, findings = asyncio.run(_status(config_path))
    for line in findings:
        click.echo(f"warning: {line}", err=True)
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    from accelkit.cli.output import print_table

    rows = [
        [
            s["agent"],
            s["workload"],
            s["runtime"] or s["type"],
            "; ".join(f"{plugin}: {','.join(ids) or '-'}" for plugin, ids in s["devices"].items()),
            s["phase"],
            _age(s["age_s"]),
            s["liveness"],
            ", ".join(s["unfinished_teardown"]) or "-",
        ]
        for s in found
    ]
    columns = ["agent", "workload", "runtime", "devices", "phase", "age", "liveness"]
    print_table("Workloads", [*columns, "unfinished"], rows)
    for s in found:
        for line in _health_lines(s):
            click.echo(line)
    if cordons:
        click.echo("cordoned: " + "; ".join(cordons))
