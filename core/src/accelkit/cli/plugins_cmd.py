"""``accelkit plugins``: the installed plugin distributions and how loading them went."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from accelkit.bridge import Bridge
from accelkit.cli.app import COMMANDS
from accelkit.cli.bridges import bridge_classes
from accelkit.cli.options import config_option, echo_warnings, json_option, read_config
from accelkit.cli.output import print_json, print_table
from accelkit.discovery import PluginLoader
from accelkit.registry import PluginRecord
from accelkit.runtime.base import Runtime, TrackingRuntime
from accelkit.runtime.registry import runtime_classes

Registered = tuple[dict[str, type[Runtime]], dict[str, type[Bridge]]]


async def _records(config_path: Path | None) -> tuple[list[PluginRecord], Registered]:
    config = read_config(config_path)
    loader = PluginLoader.from_entry_points(config.plugins.with_environment())
    timeout = loader.selection.call_timeout
    runtimes = runtime_classes(loader.pm, timeout=timeout, warn=loader.note)
    bridges = bridge_classes(loader.pm, reserved=COMMANDS, timeout=timeout, warn=loader.note)
    echo_warnings(loader.warnings)
    try:
        await loader.start()
    finally:
        await loader.close()
    return list(loader.records.values()), (runtimes, bridges)


@click.command()
@config_option
@json_option
@click.pass_context
def plugins(ctx: click.Context, config_path: Path | None, as_json: bool) -> None:
    """List installed plugins: name, distribution, version, status and error.

    Then the registered runtimes and bridges: the built-ins and those the installed
    distributions add (--json lists the plugins only).
    """
    records, (runtimes, bridges) = asyncio.run(_records(config_path))
    if as_json:
        print_json([r.as_json() for r in records])
        return
    verbose = ctx.obj.get("verbose", False) if ctx.obj else False
    rows = [
        (r.name, r.distribution, r.version, r.status, ", ".join(p.key for p in r.plugins), r.error)
        for r in records
    ]
    print_table("Plugins", ("name", "distribution", "version", "status", "keys", "error"), rows)
    kinds = [
        (name, "tracks" if issubclass(cls, TrackingRuntime) else "runs", cls.__module__)
        for name, cls in runtimes.items()
    ]
    print_table("Runtimes", ("name", "workloads", "module"), kinds)
    commands = [(f"accelkit {name}", cls.summary, cls.__module__) for name, cls in bridges.items()]
    print_table("Bridges", ("command", "serves", "module"), commands)
    if verbose:
        for record in records:
            if record.traceback:
                click.echo(f"\n{record.name}:\n{record.traceback}", err=True)
