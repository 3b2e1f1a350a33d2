"""``accelkit check``: validate a host config against the devices of this node."""

from __future__ import annotations

from pathlib import Path

import attrs
import click

from accelkit.config import HostConfig
from accelkit.config.load import HostConfigDraft, read_host_config
from accelkit.config.plugin_sections import errors_of, raise_all
from accelkit.errors import ConfigError


async def check_config(config: HostConfig | HostConfigDraft) -> tuple[str, list[str]]:
    """Validate a config on this node: a one-line summary and the warnings.

    Every problem is reported at once, as one :class:`~accelkit.errors.ConfigErrors` (or a
    single :class:`ConfigError`): those of the file's schema, those of every plugin section
    (checked even when other keys are wrong), plugins that failed to load (whatever
    ``plugins.strict`` says) and, when all of those are fine, every problem of the partition.
    """
    from accelkit.discovery import PluginLoader
    from accelkit.host import PartitionHost
    from accelkit.registry import PluginStatus

    draft = (
        config
        if isinstance(config, HostConfigDraft)
        else HostConfigDraft(config, config.plugins, ())
    )
    problems: list[ConfigError] = list(draft.errors)
    selection = attrs.evolve(draft.plugins.with_environment(), strict=False)
    loader = PluginLoader(selection)
    loader.load_entry_points()
    try:
        loader.build()
    except ConfigError as exc:
        problems.extend(errors_of(exc))
    summary = ""
    warnings = list(loader.warnings)
    if not problems and draft.config is not None:
        try:
            async with PartitionHost.open(draft.config, loader=loader) as host:
                result = host.result
                devices = sum(len(info.devices) for info in host.device_map.values())
                summary = (
                    f"{draft.config.source_name}: ok: mode {result.mode.value}, "
                    f"{len(result.assignments)} agent(s), {len(host.plugins)} plugin(s), "
                    f"{devices} device(s)"
                )
                warnings += result.warnings  # failed plugins are problems here
        except ConfigError as exc:
            problems.extend(errors_of(exc))
    source = draft.config.source_name if draft.config else selection.source or "<config>"
    failed = [r for r in loader.records.values() if r.status is PluginStatus.FAILED]
    problems[:0] = [
        ConfigError(f"plugin {r.name!r} failed: {r.error}", file=source, key="plugins")
        for r in failed
    ]
    raise_all(problems)
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

    summary, warnings = asyncio.run(check_config(read_host_config(config_path)))
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(summary)
