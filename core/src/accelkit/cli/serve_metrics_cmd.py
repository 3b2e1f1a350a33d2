"""``accelkit serve-metrics``: ``/metrics`` on 127.0.0.1 for a Prometheus server to scrape."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from accelkit.cli.options import Whole, config_option, echo_warnings, read_config
from accelkit.host import PartitionHost
from accelkit.metrics_export.server import MetricsServer
from accelkit.metrics_export.service import serve_metrics as serve


def _warn(host: PartitionHost) -> None:
    echo_warnings(host.loader.warnings)


def _announce(server: MetricsServer) -> None:
    click.echo(f"serving {server.url} (Ctrl-C stops)", err=True)


@click.command("serve-metrics")
@click.option(
    "--port",
    type=Whole(0, 65535),
    required=True,
    help="TCP port on 127.0.0.1 (0 picks a free port and prints it).",
)
@config_option
def serve_metrics(port: int, config_path: Path | None) -> None:
    """Serve the node's metrics at /metrics on 127.0.0.1 until interrupted.

    Every scrape gathers fresh figures in the Prometheus text format (see `accelkit metrics
    --prometheus`). Only the loopback interface is served; expose it further through a local
    proxy or a Prometheus agent on the node.
    """
    config = read_config(config_path)
    try:
        asyncio.run(serve(config, port, on_ready=_announce, on_host=_warn))
    except KeyboardInterrupt:
        click.echo("stopped", err=True)
