"""``accelkit devices``: the node's devices per plugin, with their health."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from accelkit.cli.options import config_option, echo_warnings, json_option, read_config
from accelkit.cli.output import print_json, print_table
from accelkit.discovery import PluginLoader
from accelkit.health import DeviceHealth
from accelkit.registry import PluginStatus
from accelkit.sizes import format_human_size
from accelkit.types import ComputeDevice


def device_json(device: ComputeDevice, health: DeviceHealth | None = None) -> dict[str, Any]:
    """One device as ``accelkit devices --json`` prints it (``health`` when it is known)."""
    from accelkit.node.health_view import health_json

    found: dict[str, Any] = {
        "device_id": device.device_id,
        "numa_node": device.numa_node,
        "hw_location": device.hw_location,
        "memory_size": device.memory_size,
        "processing_units": device.processing_units,
        "model_name": device.model_name,
    }
    if health is not None:
        found["health"] = health_json(health)
    return found


Found = dict[str, list[tuple[ComputeDevice, DeviceHealth | None]]]


async def _devices(config_path: Path | None) -> Found:
    from accelkit.node.health_view import read_health

    config = read_config(config_path)
    loader = PluginLoader.from_entry_points(config.plugins.with_environment())
    echo_warnings(loader.warnings)
    try:
        plugins = await loader.start()
        for record in loader.records.values():  # on stderr: --json output stays clean
            if record.status is PluginStatus.FAILED:
                click.echo(f"warning: plugin {record.name!r} failed: {record.error}", err=True)
        health, problems = await read_health(plugins, config)
        for line in problems:
            click.echo(f"warning: {line}", err=True)
        return {
            p.key: [(d, health.get(p.key, {}).get(d.device_id)) for d in p.devices] for p in plugins
        }
    finally:
        await loader.close()


@click.command()
@config_option
@json_option
def devices(config_path: Path | None, as_json: bool) -> None:
    """List the node's devices per plugin, with each one's health.

    Health is what the plugin reports, or 'unhealthy' with reason 'cordoned: ...' for a device
    an operator cordoned ('accelkit cordon'); an unhealthy device takes no new workload.
    """
    found = asyncio.run(_devices(config_path))
    if as_json:
        print_json({key: [device_json(d, h) for d, h in items] for key, items in found.items()})
        return
    rows = [
        (
            key,
            d.device_id,
            d.numa_node,
            d.model_name,
            format_human_size(d.memory_size) if d.memory_size else 0,
            d.processing_units,
            d.hw_location,
            _health_cell(h),
        )
        for key, items in found.items()
        for d, h in items
    ]
    columns = ("plugin", "device", "numa", "model", "memory", "units", "location", "health")
    print_table("Devices", columns, rows)


def _health_cell(health: DeviceHealth | None) -> str:
    if health is None:
        return "unknown"
    return health.state.value + (f" ({health.reason})" if health.reason else "")
