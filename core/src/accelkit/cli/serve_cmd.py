"""``accelkit serve``: the long-running node service (DESIGN §12, §15)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import signal
from decimal import Decimal
from pathlib import Path

import click

from accelkit.cli.node_service import serve_node
from accelkit.cli.options import Seconds, config_option, read_config
from accelkit.metrics_export.server import LOOPBACK, MetricsServer
from accelkit.types import is_digits

#: where /metrics is served when --listen is not given
DEFAULT_LISTEN = "127.0.0.1:9464"


def parse_listen(value: str) -> tuple[str, int]:
    """The address and port of ``HOST:PORT``; the host must be a loopback address.

    ``127.0.0.1`` (also for an empty host and ``localhost``), another ``127.x`` address, or
    ``[::1]`` for IPv6.
    """
    host, sep, port = value.rpartition(":")
    if not sep or not is_digits(port) or int(port) > 65535:
        msg = f"expected HOST:PORT such as 127.0.0.1:9464 or [::1]:9464, got {value!r}"
        raise click.BadParameter(msg, param_hint="'--listen'")
    bracketed = host.startswith("[") and host.endswith("]")
    address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None
    with contextlib.suppress(ValueError):
        address = ipaddress.ip_address(host[1:-1] if bracketed else host)
    if address is not None and address.version == 6 and not bracketed:
        msg = f"an IPv6 address goes in brackets, as in [::1]:9464, got {value!r}"
        raise click.BadParameter(msg, param_hint="'--listen'")
    if host in ("", "localhost"):
        return LOOPBACK, int(port)
    if address is None or not address.is_loopback:
        msg = (
            f"{host!r} is not the loopback interface: accelkit serves /metrics on a loopback"
            " address only (expose it through a local proxy or a Prometheus agent on the node)"
        )
        raise click.BadParameter(msg, param_hint="'--listen'")
    return str(address), int(port)


def parse_interval(value: str) -> Decimal:
    """Seconds, by the rule every duration follows (:class:`~accelkit.cli.options.Seconds`)."""
    param = click.Option(["--rediscover-interval"])
    return Decimal(str(Seconds().convert(value, param, None)))


def _say(line: str) -> None:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    click.echo(f"{now} {line}", err=True)


async def _serve(
    config_path: Path | None, listen: tuple[str, int], interval: Decimal | None
) -> None:
    config = read_config(config_path)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    seconds = interval if interval is not None else config.health.rediscover_interval

    def ready(server: MetricsServer) -> None:
        _say(f"serving {server.url}, rediscovering every {seconds} s (SIGTERM stops)")

    try:
        host, port = listen
        await serve_node(
            config, port, interval=seconds, stop=stop, say=_say, on_ready=ready, host=host
        )
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


@click.command("serve")
@config_option
@click.option(
    "--listen",
    "listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    metavar="HOST:PORT",
    help="Where /metrics is served: a loopback address only (127.0.0.1, [::1]); port 0 picks"
    " a free port.",
)
@click.option(
    "--rediscover-interval",
    "interval",
    default=None,
    metavar="S",
    help="Seconds between two rediscoveries (default: [health] rediscover-interval, 60).",
)
def serve(config_path: Path | None, listen: str, interval: str | None) -> None:
    """Run the node service until SIGTERM or SIGINT.

    Reconciles the ledger on start (live workloads are adopted, dead ones torn down), watches
    the devices' health, rediscovers the devices every interval (new devices join the maps,
    or wait unassigned in the split modes; vanished ones are cordoned), serves /metrics, and
    says each change in one line on stderr. Stopping leaves every workload running.
    """
    address = parse_listen(listen)
    seconds = None if interval is None else parse_interval(interval)
    asyncio.run(_serve(config_path, address, seconds))
    _say("stopped; workloads keep running")
