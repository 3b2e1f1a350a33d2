"""``accelkit status``: the workloads of the node's ledger, after a full reconciliation."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import gc
import itertools
import json
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from accelkit.cli.options import config_option, echo_warnings, json_option, read_config
from accelkit.errors import UnknownAgent
from accelkit.health import DeviceHealth
from accelkit.plugin import PluginRole
from accelkit.types import DeviceId, DeviceName
from accelkit.workload.operator_status import status_rows
from accelkit.workload.status_row import share_enforcement

if TYPE_CHECKING:
    from accelkit.node import Node
    from accelkit.workload.ledger import Ledger

Health = Mapping[DeviceName, Mapping[DeviceId, DeviceHealth]]
Roles = Mapping[str, PluginRole]
#: listings show cores, memory, then the accelerators
_ORDER = {PluginRole.CORES: 0, PluginRole.MEMORY: 1}


#: rows, their JSON tails (``--json``), cordons, findings, the agents, the plugins' roles
Snapshot = tuple[list[dict[str, Any]], list[str], list[str], list[str], set[str], Roles]


async def _status(config_path: Path | None, *, with_held: bool) -> Snapshot:
    """Rows, cordons, findings, the node's agents and its plugins' roles.

    One snapshot: the records and liveness the opening reconciliation judged (each record
    read once, each workload's liveness asked once), what it finished since read
    incrementally. ``with_held`` (``--json``) gives, instead of each row's health and notes,
    its tail (:func:`_json_tails`) with the seconds it has held its devices.
    """
    from accelkit.node import Node
    from accelkit.runtime.registry import RuntimesOnDemand, installed_runtimes

    config = read_config(config_path)
    # a workload whose owner runs needs no runtime to tell it lives: built when one does
    runtimes = RuntimesOnDemand(
        lambda: installed_runtimes(
            node.host.loader.pm,
            timeout=config.plugins.call_timeout,
            warn=node.host.loader.note,
        )
    )
    node = Node.open(config, runtimes=runtimes)
    try:
        return await _snapshot(node, with_held=with_held)
    finally:
        await runtimes.close()


async def _snapshot(node: Node, *, with_held: bool) -> Snapshot:
    """:func:`_status` of a node not yet started."""
    from accelkit.node.health_notes import read_notes

    async with node:
        echo_warnings(node.host.loader.warnings)
        rows = await status_rows(node.bookkeeper, reconcile=False)  # as node.status(...)
        notes = read_notes(node.bookkeeper.ledger)
        health = _health_rows(node.health.snapshot())
        tails: list[str] = []
        if with_held:
            tails = _json_tails(rows, health, notes, _held(node.bookkeeper.ledger))
        else:
            shown: Shown = {}
            for row in rows:
                key = (row["agent"], row["workload"])
                _add_health(row, health, notes.get(key, []), shown)
        cordons = [
            f"{plugin}/{device}: {cordon.reason or '(no reason given)'}"
            for (plugin, device), cordon in sorted(node.health.cordons().items())
        ]
        findings = list(dict.fromkeys(node.last_report.messages()))
        roles = {str(k): role for k, role in node.host.roles.items()}
        return rows, tails, cordons, findings, set(node.host.agents), roles


def _health_rows(health: Health) -> dict[str, dict[str, dict[str, Any]]]:
    """Each device's health as ``status --json`` prints it, made once per device."""
    from accelkit.node.health_view import health_json

    return {
        plugin: {device: health_json(h) for device, h in devices.items()}
        for plugin, devices in health.items()
    }


def _held(ledger: Ledger) -> dict[tuple[str, str], dict[str, dict[str, str]]]:
    """Per workload, the seconds it has held each device so far (see ``occupancy``)."""
    from accelkit.workload.occupancy import held_now

    return held_now(ledger)


#: per plugin and set of device ids, what ``status --json`` shows of their health
Shown = dict[tuple[str, tuple[str, ...]], dict[str, Any]]


def _add_health(
    row: dict[str, Any],
    health: dict[str, dict[str, dict[str, Any]]],
    notes: list[Any],
    shown: Shown,
) -> None:
    """One workload's row (``WorkloadStatus.to_json``) with the health of its devices and
    its notes, as ``status --json`` prints it.

    The health of a set of devices is made once (``shown``) and shared by the rows of the
    workloads that hold that set: thousands of workloads hold a few sets (all of the memory,
    one GPU).
    """
    rows_health = {}
    for plugin, ids in row["devices"].items():
        key = (plugin, tuple(ids))
        found = shown.get(key)
        if found is None:
            known = health.get(plugin, {})
            found = shown[key] = {device: known[device] for device in ids if device in known}
        rows_health[plugin] = found
    row["health"] = rows_health
    row["notes"] = [note.to_json() for note in notes]


def _json_tails(
    rows: list[dict[str, Any]],
    health: dict[str, dict[str, dict[str, Any]]],
    notes: Mapping[tuple[str, str], list[Any]],
    held: Mapping[tuple[str, str], dict[str, dict[str, str]]],
) -> list[str]:
    """Per row, the JSON text of what :func:`_add_health` and the held seconds would add
    to it (``health``, ``notes``, ``held_seconds``), each key after the row's own, for
    :func:`_json_lines` to write after them.

    The health of a set of devices is written once, as text, for every row that holds
    that set (thousands of workloads hold a few): no per-row health to make or encode.
    """
    encode = _encoder()
    texts: dict[tuple[tuple[str, ...], ...], str] = {}
    tails = []
    for row in rows:
        devices = row["devices"]
        held_set = tuple([(plugin, *ids) for plugin, ids in devices.items()])
        text = texts.get(held_set)
        if text is None:
            text = texts[held_set] = encode(
                {
                    plugin: {d: known[d] for d in ids if d in known}
                    for plugin, ids in devices.items()
                    for known in [health.get(plugin, {})]
                }
            )
        key = (row["agent"], row["workload"])
        noted = notes.get(key)
        noted_text = encode([note.to_json() for note in noted]) if noted else "[]"
        tails.append(
            f', "health": {text}, "notes": {noted_text}, '
            f'"held_seconds": {encode(held.get(key, {}))}}}'
        )
    return tails


def _json_lines(found: list[dict[str, Any]], tails: list[str] | None = None) -> str:
    """The workloads as a JSON list, one per line (:func:`_json_pieces`, joined)."""
    return "".join(_json_pieces(found, tails))


#: rows per piece of ``status --json``'s text: a few pieces, none of them large
PIECE_ROWS = 256


def _json_pieces(found: list[dict[str, Any]], tails: list[str] | None = None) -> Iterator[str]:
    """The workloads as a JSON list, one per line, in pieces of :data:`PIECE_ROWS` rows:
    encoded whole in C (``indent`` would take Python's encoder, a tenth of a second per
    thousand workloads), by one encoder (``json.dumps`` makes one per call, a third of the
    time for thousands of rows). Written piece by piece, the text of thousands of rows is
    never held whole, nor copied to add the last newline or encoded at once.

    ``tails`` (:func:`_json_tails`, one per row) end each row's object instead of its
    closing brace (the rows of ``status`` are never empty).
    """
    if not found:
        yield "[]"
        return
    lines = _row_encoder()(found)
    if tails is not None:
        lines = (line[:-1] + tail for line, tail in zip(lines, tails, strict=True))
    opening = "[\n  "
    while piece := list(itertools.islice(lines, PIECE_ROWS)):
        yield opening + ",\n  ".join(piece)
        opening = ",\n  "
    yield "\n]"


def _encoder() -> Callable[[Any], str]:
    """One value's text as ``json.dumps`` writes it, by one C encoder where there is one."""
    from json import encoder

    make_encoder = getattr(encoder, "c_make_encoder", None)  # not in the stubs
    if make_encoder is None:  # an interpreter without the C encoder
        return json.dumps
    make = make_encoder(
        None, None, encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True
    )
    return lambda value: "".join(make(value, 0))


def _row_encoder() -> Callable[[list[dict[str, Any]]], Iterator[str]]:
    """Each row's text as ``json.dumps`` writes it (:func:`_encoder`)."""
    encode = _encoder()
    return lambda rows: map(encode, rows)


def _age(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


#: the longest workload id the table shows whole; longer ones end in "…" (``--wide``: whole)
SHORT_ID = 20


def _short(workload_id: str) -> str:
    return workload_id if len(workload_id) <= SHORT_ID else workload_id[: SHORT_ID - 1] + "…"


def _devices(
    row: dict[str, Any], roles: Roles, orders: dict[tuple[str, ...], list[str]] | None = None
) -> str:
    """``cpu:1-3 mem:1G cuda:cuda0-1``: ids as ranges, memory as a size, fractions shown.

    ``orders`` keeps each set of plugins in the order shown, for the rows that follow.
    """
    amounts = row["amounts"]
    data = row.get("resource_data") or {}
    plugins = tuple(amounts)
    shown = None if orders is None else orders.get(plugins)
    if shown is None:
        shown = sorted(plugins, key=lambda p: _ORDER.get(roles.get(p, PluginRole.ACCELERATOR), 2))
        if orders is not None:
            orders[plugins] = shown
    parts = [
        _held_text(
            plugin,
            tuple(amounts[plugin].items()),
            roles.get(plugin),
            share_enforcement(data[plugin]) if plugin in data else None,
        )
        for plugin in shown
    ]
    return " ".join(parts) or "-"


@functools.lru_cache(maxsize=1024)  # workloads of one shape (1 GiB, 1 GPU...) show alike
def _held_text(
    plugin: str, amounts: tuple[tuple[str, str], ...], role: PluginRole | None, how: str | None
) -> str:
    """What a workload holds of one plugin, as :func:`_devices` shows it."""
    from accelkit.cli.output import compact_ids
    from accelkit.sizes import format_human_size

    held = {device: Decimal(amount) for device, amount in amounts}
    if role is PluginRole.MEMORY:
        text = format_human_size(int(sum(held.values())))
    else:
        whole = [d for d, a in held.items() if a == a.to_integral_value()]
        held_as = f"({how})" if how else ""
        shares = [f"{d}:{a.normalize():f}{held_as}" for d, a in held.items() if d not in whole]
        text = ",".join(([compact_ids(whole)] if whole else []) + shares)
    return f"{plugin}:{text}"


def _health_lines(row: dict[str, Any]) -> list[str]:
    """Below the table: each device of the workload that is not healthy, then its notes."""
    who = f"{row['workload']} ({row['agent']})"
    lines = [
        f"health: {who}: {plugin}/{device} is {h['state']}"
        + (f" ({h['reason']})" if h["reason"] else "")
        for plugin, devices in row["health"].items()
        for device, h in devices.items()
        if h["state"] != "healthy"
    ]
    return lines + [f"note: {who}: {note['text']}" for note in row["notes"]]


def _print_table(found: list[dict[str, Any]], roles: Roles, *, wide: bool) -> None:
    from accelkit.cli.output import print_table

    columns = ["workload", "agent", "phase", "age", "liveness", "devices"]
    if wide:
        columns += ["runtime", "handle", "unfinished"]
    rows = []
    orders: dict[tuple[str, ...], list[str]] = {}
    for s in found:
        row = [
            s["workload"] if wide else _short(s["workload"]),
            s["agent"],
            s["phase"],
            _age(s["age_s"]),
            s["liveness"],
            _devices(s, roles, orders),
        ]
        if wide:
            row += [
                s["runtime"] or s["type"],
                s["handle"],
                ", ".join(s["unfinished_teardown"]) or "-",
            ]
        rows.append(row)
    print_table("Workloads", columns, rows)


@click.command()
@config_option
@click.option("--agent", "agent", default=None, help="Only this agent's workloads.")
@click.option(
    "--wide", is_flag=True, help="Whole workload ids, runtime, handle and unfinished teardowns."
)
@click.option("-q", "--quiet", is_flag=True, help="Print the workload ids only, one per line.")
@json_option
def status(
    config_path: Path | None, agent: str | None, wide: bool, quiet: bool, as_json: bool
) -> None:
    """The node's workloads: agent, workload id, runtime, devices, phase, age, liveness,
    unfinished teardowns, the health of their devices and what happened to it; then the
    cordoned devices. --json prints one workload per line and also gives the seconds each
    workload has held each device.

    Opening the node reconciles the ledger first: dead workloads are torn down and freed,
    containers of this ledger that no record names are removed, and what that found is
    printed on stderr.
    """
    if quiet and (wide or as_json):
        msg = "-q prints ids only: it cannot be combined with --wide or --json"
        raise click.UsageError(msg)
    with _collector_paused():
        _show(config_path, agent, wide=wide, quiet=quiet, as_json=as_json)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic collector paused while a snapshot is made and printed.

    Everything the snapshot makes lives until it is printed: the collector would traverse it
    again and again (and all of it once more when it resumes) to find nothing, about a tenth
    of the command with 2,000 workloads. What the command leaves is handed to the oldest
    generation untraversed (frozen, then unfrozen) before the collector resumes.

    At the exit of the process, everything is frozen before the interpreter's last
    collections: they would traverse every object left (the modules', the node's) to free
    nothing the exit does not free, a fifth of the command. A process that goes on (a test,
    an embedding program) is unaffected until it exits.
    """
    _freeze_at_exit()
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        gc.enable()


@functools.cache  # registered once per process
def _freeze_at_exit() -> None:
    atexit.register(gc.freeze)


def _show(
    config_path: Path | None, agent: str | None, *, wide: bool, quiet: bool, as_json: bool
) -> None:
    found, tails, cordons, findings, agents, roles = asyncio.run(
        _status(config_path, with_held=as_json)
    )
    for line in findings:
        click.echo(f"warning: {line}", err=True)
    if agent is not None:
        if agent not in agents | {s["agent"] for s in found}:
            msg = str(UnknownAgent(agent, agents))
            raise click.BadParameter(msg, param_hint="'--agent'")
        if as_json:
            tails = [tail for s, tail in zip(found, tails, strict=True) if s["agent"] == agent]
        found = [s for s in found if s["agent"] == agent]
    if as_json:
        for piece in _json_pieces(found, tails):
            click.echo(piece, nl=False)
        click.echo()
        return
    if quiet:
        for s in found:
            click.echo(s["workload"])
        return
    _print_table(found, roles, wide=wide)
    for s in found:
        for line in _health_lines(s):
            click.echo(line)
    if cordons:
        click.echo("cordoned: " + "; ".join(cordons))
