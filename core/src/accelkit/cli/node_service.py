"""The node service that ``accelkit serve`` runs until it is told to stop.

It opens a :class:`~accelkit.node.Node` (which reconciles the ledger: live workloads are
adopted, dead ones torn down), serves ``/metrics`` with the device health series, runs the
plugins' health watches, and every ``interval`` seconds rediscovers the devices and refreshes
their health. Every change of the health board (a device added, removed, turning unhealthy or
healthy, cordoned) is said in one line. Stopping leaves every workload running: their records
stay in the ledger and the next start adopts them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from decimal import Decimal

from accelkit.config import HostConfig
from accelkit.errors import AccelkitError
from accelkit.health import DeviceHealth
from accelkit.metrics_export.exposition import Exposition
from accelkit.metrics_export.gather import MetricsGatherer
from accelkit.metrics_export.server import LOOPBACK, MetricsServer
from accelkit.node import Node
from accelkit.node.health_board import DeviceChange, Subscription
from accelkit.workload.occupancy import read_held

__all__ = ["describe", "serve_node"]

Say = Callable[[str], None]


def _health(health: DeviceHealth) -> str:
    return f"{health.state.value} ({health.reason})" if health.reason else health.state.value


def describe(change: DeviceChange) -> str:
    """One line for a change of the health board."""
    name = f"device {change.plugin}/{change.device_id}"
    if change.kind == "added" and change.old is None and change.new is not None:
        return f"{name} added: {_health(change.new)}"
    if change.kind == "removed" or change.new is None:
        why = f" ({change.new.reason})" if change.new is not None and change.new.reason else ""
        return f"{name} removed{why}"
    old = "new" if change.old is None else _health(change.old)
    return f"{name}: {old} -> {_health(change.new)}"


async def _say_changes(changes: Subscription, say: Say) -> None:
    async for change in changes:
        say(describe(change))


def _drain(changes: Subscription, say: Say) -> None:
    while (change := changes.get_nowait()) is not None:
        say(describe(change))


class _Rediscovery:
    """Rediscovers and says what the board does not: failed plugins, vanished devices held."""

    def __init__(self, node: Node, say: Say) -> None:
        self.node = node
        self.say = say
        self._said: set[str] = set()
        #: the error of the last round ("" when it went through)
        self.failure = ""

    async def __call__(self) -> None:
        report = await self.node.rediscover()
        lines = [
            f"plugin {k!r} rediscovery failed: {p.error}"
            for k, p in report.plugins.items()
            if p.error
        ]
        held = {
            f"device {h.plugin}/{h.device_id} is gone but workload {h.workload_id!r} of agent "
            f"{h.agent_id!r} still holds it"
            for h in report.held
        }
        for line in [*lines, *sorted(held - self._said)]:
            self.say(line)
        self._said = held
        for key, found in report.plugins.items():
            if found.reassigned:
                agents = ", ".join(found.reassigned)
                self.say(f"plugin {key!r}: agents {agents} follow the recorded assignment")
            for device in found.unassigned:
                self.say(
                    f"device {key}/{device} is unassigned: 'accelkit repartition' gives it to "
                    "an agent"
                )


async def _slurm_resume(node: Node, say: Say) -> None:
    """With ``[bridge.slurm] resume = true``: lift the drains accelkit's Slurm prolog set whose
    devices recovered (DESIGN §16)."""
    settings = node.config.bridge.slurm
    if settings is None or not settings.resume:
        return
    from accelkit.bridge.slurm.drains import resume_recovered

    for line in await resume_recovered(node, settings.scontrol):
        say(line)


def _prolog_server(
    node: Node, lock: asyncio.Lock, say: Say
) -> contextlib.AbstractAsyncContextManager[object]:
    """With ``[bridge.slurm] serve-prologs = true``: answer Slurm prologs on a unix socket."""
    settings = node.config.bridge.slurm
    if settings is None or not settings.serve_prologs:
        return contextlib.nullcontext()
    from accelkit.bridge.slurm.prolog_server import PrologServer

    return PrologServer(node, settings, lock, say)


async def _round(node: Node, rediscover: _Rediscovery, say: Say) -> None:
    """One rediscovery and health refresh; a problem of the state dir (a damaged cordon or
    assignment file) is said and retried at the next round instead of ending the service."""
    try:
        await rediscover()
        await node.health_keeper.refresh()
        await _slurm_resume(node, say)
    except AccelkitError as exc:
        line = f"error: {exc} (retried in the next round)"
        if line != rediscover.failure:  # said once, not every round
            say(line)
        rediscover.failure = line
        return
    if rediscover.failure:
        say("the state directory reads again: rounds go on as before")
        rediscover.failure = ""


async def serve_node(
    config: HostConfig,
    port: int,
    *,
    interval: Decimal,
    stop: asyncio.Event,
    say: Say,
    on_ready: Callable[[MetricsServer], None] | None = None,
    host: str = LOOPBACK,
) -> None:
    """Run the node service until ``stop`` is set (see the module docstring).

    Raises what opening the node raises (``ConfigError``, ...) and ``MetricsServerError``
    when the port cannot be bound; nothing is left running then.
    """
    async with Node.open(config) as node:
        for agent_id, workload_id in node.last_report.kept:
            say(f"adopted live workload {workload_id!r} of agent {agent_id!r}")
        for line in dict.fromkeys([*node.warnings, *node.last_report.messages()]):
            say(line)
        found = node.host.device_map  # read on every scrape: rediscovered devices show up
        exposition = Exposition(
            MetricsGatherer(node.host),
            lambda: {k: v.devices for k, v in found.items()},
            health=lambda: node.health,
            held=lambda: read_held(
                node.bookkeeper.ledger,
                {str(k): [d.device_id for d in v.devices] for k, v in found.items()},
            ),
        )
        rediscover = _Rediscovery(node, say)
        changes = node.health.changes()
        serving = MetricsServer(exposition.render, port, host=host)
        lock = asyncio.Lock()  # a round and a Slurm prolog never run at once
        watching = node.health_keeper.watching()
        async with serving as server, watching, _prolog_server(node, lock, say):
            teller = asyncio.create_task(_say_changes(changes, say), name="serve:changes")
            try:
                async with lock:
                    await rediscover()
                    await node.health_keeper.refresh()
                    await _slurm_resume(node, say)
                if on_ready is not None:
                    on_ready(server)
                while not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), float(interval))
                        break
                    async with lock:
                        await _round(node, rediscover, say)
            finally:
                teller.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await teller
                _drain(changes, say)
                changes.close()
