"""``accelkit run``: a command as a contained workload (its own cgroups, or a container)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import click

from accelkit.cli.options import (
    Seconds,
    config_option,
    echo_warnings,
    pick_agent,
    read_config,
)
from accelkit.cli.runtime_choice import RuntimeChoice
from accelkit.config.rules import MAX_PIDS
from accelkit.errors import InsufficientResource
from accelkit.node import Node
from accelkit.sizes import parse_binary_size
from accelkit.types import SlotName, amount_in_range, range_problem
from accelkit.workload.runner import run_workload

if TYPE_CHECKING:
    from accelkit.config import HostConfig

#: the status of a run that accelkit itself refused or failed (as ``docker run``'s)
EXIT_ACCELKIT = 125


def parse_slots(text: str) -> dict[SlotName, Decimal]:
    """``cpu=2,mem=1G,cuda.shares=0.5`` → amounts; sizes take binary suffixes (``1G``)."""
    slots: dict[SlotName, Decimal] = {}
    items = [part.strip() for part in text.split(",")]
    if any(items) and not all(items):
        msg = f"an empty item between commas in {text!r}"
        raise click.BadParameter(msg, param_hint="--slots")
    for item in filter(None, items):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            msg = f"expected SLOT=AMOUNT, got {item!r}"
            raise click.BadParameter(msg, param_hint="--slots")
        if name in slots:
            msg = f"slot {name!r} given twice"
            raise click.BadParameter(msg, param_hint="--slots")
        try:
            if not value.isascii():  # Decimal() also reads full-width and other digits
                raise ValueError(value)
            amount = Decimal(parse_binary_size(value)) if value[-1].isalpha() else Decimal(value)
        except (ValueError, InvalidOperation):
            msg = f"slot {name!r}: {value!r} is not an amount"
            raise click.BadParameter(msg, param_hint="--slots") from None
        if not amount.is_finite() or amount < 0:
            msg = f"slot {name!r}: amount must be a non-negative number, got {value!r}"
            raise click.BadParameter(msg, param_hint="--slots")
        if amount == 0:
            msg = f"slot {name!r}: an amount of 0 asks for nothing; leave the slot out"
            raise click.BadParameter(msg, param_hint="--slots")
        if not amount_in_range(amount):  # what a device, a grant and the ledger can hold
            msg = f"slot {name!r}: {range_problem(amount, value)}"
            raise click.BadParameter(msg, param_hint="--slots")
        slots[SlotName(name)] = amount
    if not slots:
        msg = "no slot requested"
        raise click.BadParameter(msg, param_hint="--slots")
    return slots


def parse_pids(
    _ctx: click.Context | None, _param: click.Parameter | None, value: str | None
) -> int | None:
    """``--pids N``: a whole number of processes from 1 to the kernel's largest ``pid_max``."""
    if value is None:
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_PIDS:
        msg = f"expected a whole number of processes from 1 to {MAX_PIDS}, got {value!r}"
        raise click.BadParameter(msg, param_hint="--pids")
    return int(text)


class RunCommand(click.Command):
    """``accelkit run``: its own refusals and failures exit 125, not 2 (DESIGN §18), so that
    they do not collide with the workload's statuses (as ``docker run``)."""

    failure_status = EXIT_ACCELKIT


def _echo(line: str) -> None:
    click.echo(line if line.startswith(("error:", "warning:")) else f"accelkit: {line}", err=True)


@attrs.frozen
class _RunOptions:
    runtime: str
    image: str | None
    grace: float
    no_memory_limit: bool
    verbose: bool
    pids: int | None = None


def _engine_ahead(runtime: str, config: HostConfig) -> contextlib.AbstractAsyncContextManager[None]:
    """For a docker run, the engine's client imported and the engine asked while the node
    opens and books (at the version the ledger knows it by)."""
    if runtime != "docker":
        return contextlib.nullcontext()
    from accelkit.runtime.docker import engine_ahead

    return engine_ahead(state_dir=config.resource.state_dir)


async def _run(
    config_path: Path | None,
    agent_option: str | None,
    slots: dict[SlotName, Decimal],
    argv: list[str],
    options: _RunOptions,
) -> int:
    config = read_config(config_path)
    # a run leaves the orphan container sweep (engine round trips) to status, release and
    # serve; a docker run sweeps where the ledger cannot account for a container
    sweep = None if options.runtime == "docker" else False
    ahead = _engine_ahead(options.runtime, config)
    async with ahead, Node.open(config, sweep=sweep) as node:
        echo_warnings(node.host.loader.warnings)
        agent = pick_agent(agent_option, node.agents)
        for line in node.last_report.messages():
            _echo(f"warning: {line}")
        try:
            return await run_workload(
                node,
                agent,
                slots,
                argv,
                runtime=options.runtime,
                image=options.image,
                grace=options.grace,
                no_memory_limit=options.no_memory_limit,
                verbose=options.verbose,
                echo=_echo,
                pids=options.pids,
                terminal=sys.stdin is not None and sys.stdin.isatty(),
            )
        except InsufficientResource as exc:
            msg = f"cannot allocate on agent {agent!r}: {exc}"
            raise click.ClickException(msg) from exc


@click.command(cls=RunCommand, context_settings={"ignore_unknown_options": True})
@config_option
@click.option(
    "--agent", "agent", default=None, help="The agent whose devices to use (default: the only one)."
)
@click.option(
    "--slots",
    "slots_text",
    required=True,
    metavar="SLOT=AMOUNT,...",
    help="What to allocate, e.g. cpu=2,mem=1G,cuda.device=1.",
)
@click.option(
    "--grace",
    type=Seconds(zero=True),
    default=5.0,
    show_default=True,
    help="Seconds between SIGTERM (or a forwarded signal) and SIGKILL for the whole workload.",
)
@click.option(
    "--runtime",
    type=RuntimeChoice(),
    default="process",
    show_default=True,
    help="process: a process tree in cgroups of its own; docker: a container (needs --image); "
    "or a runtime an installed distribution registers (a wrong name lists them).",
)
@click.option("--image", metavar="IMG", help="The container image (--runtime docker).")
@click.option(
    "--no-memory-limit",
    is_flag=True,
    help="Run even where no memory controller can enforce the mem slot's limit.",
)
@click.option(
    "--pids",
    metavar="N",
    callback=parse_pids,
    help="The most processes and threads the workload may have at once (pids.max); "
    "default: the agent's or the node's pids, else no limit.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run(
    ctx: click.Context,
    *,
    config_path: Path | None,
    agent: str | None,
    slots_text: str,
    grace: float,
    runtime: str,
    image: str | None,
    no_memory_limit: bool,
    pids: int | None,
    command: tuple[str, ...],
) -> int:
    """Run COMMAND as a contained workload with the requested slots.

    The process runtime puts the whole tree in cgroups of its own (memory limit, cpuset, the
    accelerator device nodes it was not given denied on cgroup v1, its cgroups read-only to it
    even as root); the docker runtime runs it in a container of IMG. SIGINT, SIGTERM, SIGHUP
    and SIGQUIT reach every process of the workload; what is left after --grace seconds, or at
    a second SIGINT/SIGTERM, is killed. With a terminal on stdin the workload gets a terminal of
    its own: Ctrl-C reaches it alone, a second within --grace seconds ends all of it (SIGTERM),
    a third kills it. Prints the workload id and its devices on stderr; accelkit -v run also the
    cgroups in use.

    Exits with COMMAND's status (128 + N when it died of signal N); 127 when COMMAND is not
    found, 126 when it cannot be run, 125 when accelkit refused or failed.
    """
    slots = parse_slots(slots_text)
    if image is not None and not image.strip():
        msg = "--image is empty: name a container image"
        raise click.UsageError(msg)
    if runtime == "docker" and not image:
        msg = "--runtime docker needs --image IMG"
        raise click.UsageError(msg)
    if runtime == "process" and image:
        msg = "--image is for --runtime docker"
        raise click.UsageError(msg)
    verbose = bool((ctx.find_root().obj or {}).get("verbose"))
    options = _RunOptions(runtime, image, grace, no_memory_limit, verbose, pids)
    return asyncio.run(_run(config_path, agent, slots, list(command), options))
