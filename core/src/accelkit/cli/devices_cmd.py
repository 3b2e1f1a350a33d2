"""``accelkit devices``: the node's devices per plugin, with their health."""

from __future__ import annotations

import asyncio
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import click

from accelkit.cli.options import config_option, echo_warnings, json_option, read_config
from accelkit.cli.output import print_json, print_table
from accelkit.config import HostConfig
from accelkit.discovery import PluginLoader
from accelkit.errors import AccelkitError
from accelkit.health import DeviceHealth
from accelkit.plugin import PluginRole
from accelkit.registry import PluginStatus
from accelkit.sizes import format_human_size
from accelkit.types import ComputeDevice

#: per (plugin, device): who holds it, as the ledger says
Holders = dict[tuple[str, str], list[dict[str, str]]]


def device_json(
    device: ComputeDevice,
    health: DeviceHealth | None = None,
    held_by: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """One device as ``accelkit devices --json`` prints it (``uuid`` and ``extra``, the
    plugin's own fields such as a GPU's serial and PCI bus id, when the device has them;
    ``health`` when it is known; ``held_by`` when the ledger was read: the bookings holding
    it, empty when free)."""
    from accelkit.node.health_view import health_json

    found: dict[str, Any] = {
        "device_id": device.device_id,
        "numa_node": device.numa_node,
        "hw_location": device.hw_location,
        "memory_size": device.memory_size,
        "processing_units": device.processing_units,
        "model_name": device.model_name,
    }
    if device.uuid:
        found["uuid"] = device.uuid
    if device.extra:
        found["extra"] = dict(sorted(device.extra.items()))
    if health is not None:
        found["health"] = health_json(health)
    if held_by is not None:
        found["held_by"] = held_by
    return found


Found = dict[str, list[tuple[ComputeDevice, DeviceHealth | None]]]


def _holders(config: HostConfig) -> Holders | None:
    """Who holds each device by the ledger, read only (``None`` when it cannot be read).

    The ledger's records as they stand: a booking whose workload died is shown until a
    command that opens the node (``status``, ``run``, ``serve``) reconciles it.
    """
    if not os.path.isdir(config.resource.state_dir):
        return {}  # no state directory, no ledger: nothing booked (and no SQLite to import)
    from accelkit.workload.ledger import Ledger
    from accelkit.workload.status import held_amounts

    ledger = Ledger(config.resource.state_dir, source=config.source_name)
    try:
        records = ledger.read_all()
    except AccelkitError as exc:
        click.echo(f"warning: cannot read the ledger to say who holds what: {exc}", err=True)
        return None
    holders: Holders = {}
    for (agent, workload), record in sorted(records.items()):
        for plugin, alloc in record.allocation.items():
            for held_id, total in held_amounts(alloc).items():
                entry = {"agent": agent, "workload": workload, "amount": str(total)}
                holders.setdefault((plugin, held_id), []).append(entry)
    return holders


async def _devices(config_path: Path | None, memory: set[str]) -> tuple[Found, Holders | None]:
    """The devices per plugin with their health, and their holders; ``memory`` gets the keys
    of the memory plugins."""
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
        found: Found = {
            p.key: [(d, health.get(p.key, {}).get(d.device_id)) for d in p.devices] for p in plugins
        }
        memory.update(p.key for p in plugins if p.role is PluginRole.MEMORY)
        return found, _holders(config)
    finally:
        await loader.close()


@click.command()
@config_option
@json_option
def devices(config_path: Path | None, as_json: bool) -> None:
    """List the node's devices per plugin, with each one's health and who holds it.

    A 'uuid' column appears when some device has a UUID (GPUs); --json prints every field,
    a GPU's serial, PCI bus id, board part number, VBIOS and driver versions among them.

    Health is what the plugin reports, or 'unhealthy' with reason 'cordoned: ...' for a device
    an operator cordoned ('accelkit cordon'); an unhealthy device takes no new workload.
    'held by' names the workloads the ledger books on the device (with the amount where it is
    a share), or 'free'.
    """
    memory: set[str] = set()
    found, holders = asyncio.run(_devices(config_path, memory))
    if as_json:
        print_json(
            {
                key: [
                    device_json(
                        d, h, None if holders is None else holders.get((key, d.device_id), [])
                    )
                    for d, h in items
                ]
                for key, items in found.items()
            }
        )
        return
    rows: list[tuple[Any, ...]] = [
        (
            key,
            d.device_id,
            d.numa_node,
            d.model_name,
            format_human_size(d.memory_size) if d.memory_size else None,
            d.processing_units,
            d.hw_location,
            _health_cell(h),
            _held_cell(holders, key, d, memory=key in memory),
        )
        for key, items in found.items()
        for d, h in items
    ]
    columns: tuple[str, ...] = (
        "plugin", "device", "numa", "model", "memory", "units", "location", "health"
    )  # fmt: skip
    if any(d.uuid for items in found.values() for d, _h in items):
        # GPUs have one; a node of cores and memory only keeps its table narrow
        uuids = [d.uuid or "" for items in found.values() for d, _h in items]
        rows = [(*row[:2], uuid, *row[2:]) for row, uuid in zip(rows, uuids, strict=True)]
        columns = (*columns[:2], "uuid", *columns[2:])
    print_table("Devices", (*columns, "held by"), rows)


def _held_cell(holders: Holders | None, key: str, device: ComputeDevice, *, memory: bool) -> str:
    """``free``, or each holder as ``workload (agent)`` with its part where it is one."""
    if holders is None:
        return "?"
    held = holders.get((key, device.device_id), [])
    if not held:
        return "free"

    def part(amount: Decimal) -> str:
        if memory:
            return f" {format_human_size(int(amount))}"
        return "" if amount == amount.to_integral_value() else f" {amount.normalize():f}"

    return ", ".join(f"{h['workload']} ({h['agent']}){part(Decimal(h['amount']))}" for h in held)


def _health_cell(health: DeviceHealth | None) -> str:
    if health is None:
        return "unknown"
    return health.state.value + (f" ({health.reason})" if health.reason else "")
