"""``accelkit plan``: how the node's devices are split among the agents."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import click

from accelkit.cli.options import Whole, config_option, echo_warnings, json_option, read_config
from accelkit.config.model import AllocationMode, HostConfig
from accelkit.plugin import AbstractComputePlugin, PluginRole
from accelkit.types import DeviceName

#: --agents above this is refused before any agent is made (a node has fewer devices)
MAX_AGENTS = 4096


def plan_config(config: HostConfig, mode: str | None, agent_count: int | None) -> HostConfig:
    """Apply ``--mode`` and ``--agents`` to the loaded config."""
    if mode is not None:
        config = config.with_mode(AllocationMode(mode))
    if agent_count is not None:
        if config.resource.allocation_mode is AllocationMode.MANUAL:
            msg = (
                "--agents cannot be used with allocation-mode 'manual': "
                "the agents and their resources come from the config"
            )
            raise click.UsageError(msg)
        config = config.with_agent_count(agent_count)
    return config


async def compute_plan(
    config: HostConfig, *, agents_asked: int | None = None
) -> tuple[dict[str, Any], dict[DeviceName, PluginRole]]:
    """Start a partition host on ``config``; its plan, and each plugin's role by key.

    Devices that are unhealthy, degraded or cordoned are among the plan's warnings, and so
    are devices that live workloads hold and this plan gives to another agent.
    ``agents_asked`` (``--agents``) may not exceed the node's devices: the agents beyond them
    would get nothing.
    """
    from accelkit.host import PartitionHost
    from accelkit.host.plan import health_warnings
    from accelkit.node.health_view import read_health
    from accelkit.node.held_devices import read_only_notes

    async with PartitionHost.open(config) as host:
        echo_warnings(host.loader.warnings)  # the plan's own warnings are part of the plan
        devices = sum(len(plugin.devices) for plugin in host.plugins.values())
        if agents_asked is not None and agents_asked > max(devices, 1):
            msg = (
                f"{agents_asked} is more agents than the node has devices ({devices}):"
                " each agent past them would get nothing"
            )
            raise click.BadParameter(msg, param_hint="'--agents'")
        plan = host.plan()
        roles = host.roles
        health, problems = await read_health(host.plugins.values(), config)
        plan["warnings"] += [*health_warnings(health, roles), *problems]
        plan["warnings"] += read_only_notes(host)  # live bookings this split would move
        if topology := await _topology(host.plugins.values(), config):
            plan["topology"] = topology  # how each plugin's devices are joined, where known
        return plan, roles


async def _topology(plugins: Iterable[AbstractComputePlugin], config: HostConfig) -> dict[str, str]:
    """Per plugin, how its devices are joined, where its node info tells it (``topology``)."""
    from accelkit.calls import call_async

    found = {}
    for plugin in plugins:
        try:
            info = await call_async(
                plugin.key, "get_node_info", config.plugins.call_timeout, plugin.get_node_info
            )
        except Exception as exc:  # a plugin's failure: the plan does without it
            click.echo(f"warning: plugin {plugin.key!r}: no topology: {exc}", err=True)
            continue
        if text := info.facts.get("topology"):
            found[str(plugin.key)] = text
    return found


def _amount(slot: str, amount: str) -> str:
    """Memory's slot in binary units (``2G``), every other amount as it is."""
    if PluginRole.of_bare_slot(slot) is not PluginRole.MEMORY:
        return amount
    from accelkit.sizes import format_binary_size

    return format_binary_size(int(amount))


def print_plan(data: dict[str, Any], roles: Mapping[DeviceName, PluginRole] | None = None) -> None:
    """The plan as a table for people, then what is reserved, unassigned and worth a warning.

    ``roles`` (plugin key → role) says which plugin's devices the ``cpu`` and ``mem`` rows
    show; without it, the plugins keyed ``cpu`` and ``mem``.
    """
    from accelkit.cli.output import compact_ids, print_table
    from accelkit.host import plugin_key_of

    known = roles or {}
    rows = []
    for agent_id, agent in data["agents"].items():
        for slot, amount in agent["slots"].items():
            key = plugin_key_of(slot, known)
            devices = compact_ids(agent["devices"].get(key, []))
            rows.append((agent_id, slot, _amount(slot, amount), agent["scaling"][slot], devices))
    columns = ("agent", "slot", "amount", "scaling", "devices")
    print_table(f"Partition plan ({data['mode']})", columns, rows)
    numa = [
        f"{agent_id}: {', '.join(map(str, agent['numa_nodes']))}"
        for agent_id, agent in data["agents"].items()
        if agent.get("numa_nodes")
    ]
    if numa:
        click.echo(f"NUMA nodes: {'; '.join(numa)}")
    for key, text in data.get("topology", {}).items():
        click.echo(f"topology {key}: {text}")
    reserved = data["reserved"]
    mem = _amount("mem", reserved["mem"])
    click.echo(f"reserved: {reserved['cpu']} cpu core(s), {mem} of memory")
    for key, ids in data["unassigned"].items():
        if ids:
            click.echo(f"unassigned {key}: {compact_ids(ids)}")
    for warning in data["warnings"]:
        click.echo(f"warning: {warning}")


@click.command()
@config_option
@click.option(
    "--mode",
    type=click.Choice([m.value for m in AllocationMode]),
    default=None,
    help="Override resource.allocation-mode.",
)
@click.option(
    "--agents",
    "agent_count",
    type=Whole(min=1, max=MAX_AGENTS),
    default=None,
    help="Use N agents named agent-1 … agent-N (at most the node's devices).",
)
@json_option
def plan(
    config_path: Path | None, mode: str | None, agent_count: int | None, as_json: bool
) -> None:
    """Show how the node's devices are split among the agents."""
    import asyncio

    config = plan_config(read_config(config_path), mode, agent_count)
    data, roles = asyncio.run(compute_plan(config, agents_asked=agent_count))
    if as_json:
        import json

        click.echo(json.dumps(data, indent=2))
        return
    print_plan(data, roles)
