"""``accelkit release``: stop a workload, run the rest of its teardown, free its devices."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from accelkit.cli.options import Seconds, config_option, echo_warnings, read_config
from accelkit.types import AgentId
from accelkit.workload.status import ReleaseReport

#: how a skipped stop begins in a release report (the workload could not be reached)
UNSTOPPED = "stopping the workload"


async def _release(
    config_path: Path | None, workload: str, agent: str | None, force: bool, grace: float
) -> ReleaseReport:
    from accelkit.node import Node

    async with Node.open(read_config(config_path)) as node:
        echo_warnings(node.host.loader.warnings)
        for line in node.last_report.messages():
            click.echo(f"warning: {line}", err=True)
        return await node.release(
            workload,
            agent=None if agent is None else AgentId(agent),
            force=force,
            grace=grace,
            on_skip=lambda what: click.echo(f"warning: --force: skipping {what}", err=True),
        )


@click.command()
@config_option
@click.argument("workload")
@click.option("--agent", default=None, help="The agent of the workload (when several have one).")
@click.option(
    "--force",
    is_flag=True,
    help="Free the devices of a workload that cannot be reached or torn down, saying what is "
    "skipped.",
)
@click.option(
    "--grace",
    type=Seconds(zero=True),
    default=5.0,
    show_default=True,
    help="Seconds between SIGTERM and SIGKILL when stopping the workload.",
)
def release(
    config_path: Path | None, workload: str, agent: str | None, force: bool, grace: float
) -> None:
    """Stop WORKLOAD (grace, then kill), run the rest of its teardown and free its devices.

    WORKLOAD is a workload id as 'accelkit status' shows it. A workload run by another accelkit
    process is stopped by asking that process to end it.
    """
    report = asyncio.run(_release(config_path, workload, agent, force, grace))
    for line in report.messages():
        if line.startswith("error:"):
            click.echo(f"warning: {line}", err=True)
        elif not line.startswith("skipped:"):  # said as it was skipped
            click.echo(line)
    if any(s.startswith(UNSTOPPED) for s in report.skipped):
        msg = (
            f"warning: workload {workload!r} was not stopped: it may still run and use the "
            "devices freed now (a container is removed by the orphan sweep once its engine "
            "answers)"
        )
        click.echo(msg, err=True)
