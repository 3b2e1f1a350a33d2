"""``accelkit metrics``: the node's metrics as a table, JSON or Prometheus text."""

from __future__ import annotations

import asyncio
import contextlib
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import click

from accelkit.cli.options import (
    Seconds,
    config_option,
    echo_warnings,
    json_option,
    read_config,
)
from accelkit.cli.output import print_json, render_table
from accelkit.config import HostConfig
from accelkit.host import PartitionHost
from accelkit.metrics import Measurement
from accelkit.metrics_export.gather import MetricsGatherer
from accelkit.metrics_export.snapshot import MetricsSnapshot
from accelkit.types import format_amount

if TYPE_CHECKING:
    from rich.console import Console

_CENT = Decimal("0.01")
#: waits between refreshes of ``--watch``; tests replace it to stop the loop
pause = asyncio.sleep


def _shown(value: Decimal | None) -> str:
    """An amount for people: at most two decimals (JSON keeps every digit)."""
    if value is None:
        return "-"
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -2:
        value = value.quantize(_CENT)
    return format_amount(value)


_COLUMNS = ("plugin", "metric", "scope", "value", "capacity", "unit")


def metrics_table(snapshot: MetricsSnapshot) -> str:
    """Node, device, agent and workload figures, one row each, as a plain table."""
    rows: list[tuple[str, ...]] = []

    def row(plugin: str, key: str, scope: str, reading: Measurement, unit: str) -> None:
        rows.append((plugin, key, scope, _shown(reading.value), _shown(reading.capacity), unit))

    for plugin, metrics in snapshot.node.items():
        for m in metrics:
            row(plugin, m.key, "node", m.node, m.unit)
            for device_id, reading in m.per_device.items():
                row(plugin, m.key, f"device {device_id}", reading, m.unit)
            for parent_id, reading in m.per_parent.items():  # a GPU with MIG mode on
                row(plugin, m.key, f"device {parent_id} (parent)", reading, m.unit)
    for a in snapshot.agents:
        row(a.device_name, a.key, f"agent {a.agent_id} ({a.basis})", a.value, a.unit)
    for w in snapshot.workloads:
        scope = f"workload {w.metric.workload_id} ({w.agent_id})"
        row(w.device_name, w.metric.key, scope, w.metric.value, w.metric.unit)
    for plugin, error in snapshot.errors.items():
        rows.append((plugin, "error", "-", "-", "-", error))
    return "\n".join(["Metrics", *render_table(_COLUMNS, rows, right=("value", "capacity"))])


def prometheus_text(snapshot: MetricsSnapshot) -> str:
    """``snapshot`` in the Prometheus text exposition format."""
    # prometheus_client is imported here: it takes longer than the rest of a --json run
    from prometheus_client import CollectorRegistry, generate_latest

    from accelkit.metrics_export.prometheus import SnapshotCollector
    from accelkit.metrics_export.scrape_errors import ScrapeErrorCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snapshot))
    registry.register(ScrapeErrorCollector(lambda: snapshot))
    return generate_latest(registry).decode()


async def gather_once(config: HostConfig) -> MetricsSnapshot:
    """Start the host, gather one snapshot, stop the host."""
    async with PartitionHost.open(config) as host:
        echo_warnings(host.loader.warnings)
        return await MetricsGatherer(host).gather()


async def watch_table(
    config: HostConfig, interval: float, console: Console, *, refreshes: int | None = None
) -> None:
    """Show the table and refresh it every ``interval`` seconds (``refreshes`` times in all)."""
    from rich.live import Live  # a terminal's live display: only --watch needs rich
    from rich.text import Text

    async with PartitionHost.open(config) as host:
        echo_warnings(host.loader.warnings)
        gatherer = MetricsGatherer(host)
        shown = 1
        table = metrics_table(await gatherer.gather())
        if not console.is_terminal:
            # a pipe or a file: a live display would show nothing until it ends, so each
            # refresh is printed after the one before
            console.print(Text(table), soft_wrap=True)
            while refreshes is None or shown < refreshes:
                await pause(interval)
                console.print(Text(metrics_table(await gatherer.gather())), soft_wrap=True)
                shown += 1
            return
        with Live(Text(table), console=console, auto_refresh=False) as live:
            while refreshes is None or shown < refreshes:
                await pause(interval)
                live.update(Text(metrics_table(await gatherer.gather())), refresh=True)
                shown += 1


@click.command()
@config_option
@json_option
@click.option("--prometheus", is_flag=True, help="Print the Prometheus text exposition format.")
@click.option(
    "--watch",
    type=Seconds(),
    default=None,
    metavar="S",
    help="Refresh the table every S seconds until interrupted.",
)
def metrics(config_path: Path | None, as_json: bool, prometheus: bool, watch: float | None) -> None:
    """Show the node's metrics: per plugin, per device and per agent.

    An agent's figure comes from its own devices' readings; for memory, which agents share by
    amount, it is the node figure times the agent's scaling factor. Rates and utilisation
    appear from the second reading on, so `--watch` shows them after the first refresh.
    """
    if as_json and prometheus:
        msg = "choose one of --json and --prometheus"
        raise click.UsageError(msg)
    if watch is not None and (as_json or prometheus):
        msg = "--watch refreshes the table; it cannot be combined with --json or --prometheus"
        raise click.UsageError(msg)
    config = read_config(config_path)
    if watch is not None:
        from rich.console import Console

        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a watch ends
            asyncio.run(watch_table(config, watch, Console()))
        return
    snapshot = asyncio.run(gather_once(config))
    if as_json:
        print_json(snapshot.as_json())
    elif prometheus:
        click.echo(prometheus_text(snapshot), nl=False)
    else:
        click.echo(metrics_table(snapshot))
