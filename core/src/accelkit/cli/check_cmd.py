"""``accelkit check``: validate a host config against the devices of this node."""

from __future__ import annotations

from pathlib import Path

import attrs
import click

from accelkit.config import HostConfig, load_host_config
from accelkit.errors import ConfigError, ConfigErrors


async def check_config(config: HostConfig) -> tuple[str, list[str]]:
    """Validate ``config`` on this node: a one-line summary and the warnings.

    Every problem is reported, not only the first: plugins that failed to load (whatever
    ``plugins.strict`` says) and every problem of the partition, as one
    :class:`~accelkit.errors.ConfigErrors` (or a single :class:`ConfigError`).
    """
    from accelkit.discovery import PluginLoader
    from accelkit.host import PartitionHost
    from accelkit.registry import PluginStatus

    selection = attrs.evolve(config.plugins.with_environment(), strict=False)
    loader = PluginLoader.from_entry_points(selection)
    problems: list[ConfigError] = []
    summary = ""
    warnings: list[str] = []
    try:
        async with PartitionHost.open(config, loader=loader, reconcile=False) as host:
            result = host.result
            devices = sum(len(info.devices) for info in host.device_map.values())
            summary = (
                f"{config.source_name}: ok: mode {result.mode.value}, "
                f"{len(result.assignments)} agent(s), {len(host.plugins)} plugin(s), "
                f"{devices} device(s)"
            )
            warnings = list(result.warnings)  # failed plugins are problems here
    except ConfigErrors as exc:
        problems.extend(exc.errors)
    except ConfigError as exc:
        problems.append(exc)
    failed = [r for r in loader.records.values() if r.status is PluginStatus.FAILED]
    problems[:0] = [
        ConfigError(f"plugin {r.name!r} failed: {r.error}", file=config.source_name, key="plugins")
        for r in failed
    ]
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ConfigErrors(problems)
    return summary, warnings


@click.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="Host config (TOML) to validate.",
)
def check(config_path: Path) -> None:
    """Validate a host config: exit 0 with a summary, or 2 with every problem found."""
    import asyncio

    summary, warnings = asyncio.run(check_config(load_host_config(config_path)))
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(summary)
