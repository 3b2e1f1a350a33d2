"""``accelkit check``: validate a host config against the devices of this node."""

from __future__ import annotations

from pathlib import Path

import attrs
import click

from accelkit.cli.options import config_option
from accelkit.config import HostConfig
from accelkit.config.load import HostConfigDraft, read_host_config
from accelkit.config.plugin_sections import errors_of, raise_all
from accelkit.config.search import find_host_config
from accelkit.errors import ConfigError


@attrs.frozen
class CheckOutcome:
    """What ``check`` found: the summary (empty when there are problems), warnings, problems."""

    summary: str
    warnings: tuple[str, ...]
    problems: tuple[ConfigError, ...]


async def check_config(config: HostConfig | HostConfigDraft) -> tuple[str, list[str]]:
    """Validate a config on this node: a one-line summary and the warnings.

    Every problem is reported at once, as one :class:`~accelkit.errors.ConfigErrors` (or a
    single :class:`ConfigError`): those of the file's schema, those of every plugin section
    (checked even when other keys are wrong), plugins that failed to load (whatever
    ``plugins.strict`` says) and, when all of those are fine, every problem of the partition.
    """
    outcome = await inspect_config(config)
    raise_all(outcome.problems)
    return outcome.summary, list(outcome.warnings)


async def inspect_config(
    config: HostConfig | HostConfigDraft, *, label: str | None = None
) -> CheckOutcome:
    """Everything :func:`check_config` finds, problems included, without raising them.

    ``label`` names the config in the summary (default: its file). The warnings include
    what the ledger's live bookings say of this partition (devices it would give to another
    agent than their holder's; another config the ledger was last opened with), read only.
    """
    from accelkit.discovery import PluginLoader
    from accelkit.host import PartitionHost
    from accelkit.node.held_devices import read_only_notes
    from accelkit.registry import PluginStatus

    if isinstance(config, HostConfigDraft):
        draft = config
    else:
        draft = HostConfigDraft(config, config.plugins, ())
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
                    f"{label or draft.config.source_name}: ok: mode {result.mode.value}, "
                    f"{len(result.assignments)} agent(s), {len(host.plugins)} plugin(s), "
                    f"{devices} device(s)"
                )
                warnings += result.warnings  # failed plugins are problems here
                warnings += read_only_notes(host)
        except ConfigError as exc:
            problems.extend(errors_of(exc))
    source = draft.config.source_name if draft.config else selection.source or "<config>"
    failed = [r for r in loader.records.values() if r.status is PluginStatus.FAILED]
    problems[:0] = [
        ConfigError(f"plugin {r.name!r} failed: {r.error}", file=source, key="plugins")
        for r in failed
    ]
    return CheckOutcome("" if problems else summary, tuple(warnings), tuple(problems))


@click.command()
@config_option
def check(config_path: Path | None) -> None:
    """Validate a host config: exit 0 with a summary, or 2 with every problem found.

    The config is found as by every command (--config, $ACCELKIT_CONFIG,
    /etc/accelkit/host.toml, else the defaults); the summary names it and how it was found.
    Bookings of live workloads that this config would give to another agent are warned about.
    """
    import asyncio

    choice = find_host_config(config_path)
    choice.checked()
    label: str | None
    if choice.path is None:
        label = f"built-in defaults ({choice.found_by})"
        draft = HostConfigDraft(HostConfig(), HostConfig().plugins, ())
    else:
        by_flag = choice.found_by == "--config"
        label = None if by_flag else f"{choice.path} (from {choice.found_by})"
        draft = read_host_config(choice.path)
    outcome = asyncio.run(inspect_config(draft, label=label))
    for warning in outcome.warnings:
        click.echo(f"warning: {warning}", err=True)
    raise_all(outcome.problems)
    click.echo(outcome.summary)
