"""``accelkit slurm``: accelkit devices as Slurm GRES, and the job's Prolog/TaskProlog/Epilog.

``gres-conf`` and ``node-line`` print what ``gres.conf`` and ``slurm.conf`` need; ``prolog``
and ``epilog`` are meant for ``Prolog=`` and ``Epilog=``, and ``task-prolog-script`` prints the
``sh`` script for ``TaskProlog=`` (``task-prolog`` runs the same script). They read the job from
the environment Slurm gives them. A failure is one ``error: ...`` line on stderr, which slurmd
logs, and exit status 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import click

from accelkit.cli.options import config_option, given_path, read_config
from accelkit.config.model import HostConfig, SlurmBridgeConfig
from accelkit.errors import UnknownAgent
from accelkit.types import AgentId

if TYPE_CHECKING:
    from accelkit.bridge.slurm.gres import GresDevice

AGENT_HELP = "The agent this slurmd serves (default: the only one)."


def _settings(config: HostConfig) -> SlurmBridgeConfig:
    return config.bridge.slurm or SlurmBridgeConfig()


def _agents(known: list[str], agent: str | None, *, one: bool) -> list[AgentId]:
    if agent is not None:
        if agent not in known:
            msg = str(UnknownAgent(agent, known))
            raise click.BadParameter(msg, param_hint="--agent")
        return [AgentId(agent)]
    if one and len(known) != 1:
        msg = f"the node has several agents ({', '.join(sorted(known))}); pick one with --agent"
        raise click.UsageError(msg)
    return [AgentId(a) for a in known]


def _check_names(devices: list[GresDevice]) -> None:
    """A plugin key used as GRES name must be one Slurm reads (``acme-npu`` is not)."""
    from accelkit.config.model import GRES_NAME

    for device in devices:
        if not GRES_NAME.fullmatch(device.name):
            msg = (
                f"plugin {device.plugin!r}: {device.name!r} is not a Slurm GRES name (a letter, "
                "then letters, digits and '_'); name it in [bridge.slurm] gres-names"
            )
            raise click.ClickException(msg)


def _node_name(base: str, agent: AgentId, several: bool) -> str:
    return f"{base}-{agent}" if several else base


async def _gres(
    config_path: Path | None,
    agent: str | None,
    node_name: str | None,
    *,
    healthy: bool = False,
    written: Path | None = None,
) -> tuple[list[str], list[str]]:
    """The ``gres.conf`` lines and the ``NodeName ... Gres=`` lines; ``healthy``: without the
    devices that are unhealthy or cordoned; ``written``: recorded as the ``gres.conf`` there."""
    from accelkit.bridge.slurm.gres import divisible_notes, gres_conf, gres_devices, node_gres
    from accelkit.bridge.slurm.gres_index import record
    from accelkit.health import HealthState
    from accelkit.host import PartitionHost
    from accelkit.node import Node

    config = read_config(config_path)
    settings = _settings(config)
    async with contextlib.AsyncExitStack() as stack:
        node = await stack.enter_async_context(Node.open(config)) if healthy else None
        host = node.host if node else await stack.enter_async_context(PartitionHost(config))
        agents = _agents(list(host.agents), agent, one=False)
        several = agent is None and len(agents) > 1
        base = node_name or socket.gethostname().split(".")[0]
        conf: list[str] = []
        nodes: list[str] = []
        for agent_id in agents:
            devices = await gres_devices(
                host.agents[agent_id], settings.gres_names, config.plugins.hook_timeout
            )
            _check_names(devices)
            if node is not None:
                devices = [
                    d
                    for d in devices
                    if node.health.of(d.plugin, d.device_id).state is not HealthState.UNHEALTHY
                ]
            if written is not None:
                record(config.resource.state_dir, agent_id, devices)
            name = _node_name(base, agent_id, several)
            conf += divisible_notes(host.agents[agent_id])
            conf += gres_conf(devices, name if several else None)
            gres = node_gres(devices)
            nodes.append(f"NodeName={name} Gres={gres}" if gres else f"NodeName={name}")
        return conf, nodes


LEAVE_OUT = click.option(
    "--leave-out-unhealthy",
    "leave_out",
    is_flag=True,
    help="Leave out the devices that are unhealthy or cordoned now.",
)
#: a Slurm NodeName accelkit writes: a host name's letters, digits, '.', '-' and '_' (no
#: spaces, commas or brackets, which slurm.conf reads as lists and ranges)
NODE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9])?", re.ASCII)


def _node_name_value(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not NODE_NAME.fullmatch(value):
        msg = (
            f"{value!r} is not a Slurm NodeName: letters, digits, '.', '-' and '_', starting "
            "and ending with a letter or digit (at most 64)"
        )
        raise click.BadParameter(msg, param=param)
    return value


node_name_option = click.option(
    "--node-name",
    default=None,
    callback=_node_name_value,
    help="Slurm's NodeName (default: the short host name; with several agents, NAME-AGENT).",
)


@click.group("slurm")
def slurm() -> None:
    """Serve accelkit devices to Slurm as GRES, with the plugins' hooks around each job."""


@slurm.command("gres-conf")
@config_option
@click.option("--agent", default=None, help="Only this agent's devices (default: every agent).")
@node_name_option
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    callback=given_path,
    default=None,
    help="Write the lines to this file (atomically) instead of printing them.",
)
@LEAVE_OUT
def gres_conf_cmd(
    config_path: Path | None,
    agent: str | None,
    node_name: str | None,
    output: Path | None,
    leave_out: bool,
) -> None:
    """Print the gres.conf lines of the node: one line per device, in accelkit's order.

    Name is the plugin key (or its [bridge.slurm] gres-names entry: cuda is gpu), Type the
    device model, File the device node the plugin gives a container of it (Count=1 where it
    has none), Cores the cpu plugin's cores on the device's NUMA node. With several agents
    and no --agent, each line starts with the agent's NodeName (see node-line). --output
    records the devices written, which the prolog maps Slurm's indices through.
    """
    from accelkit.bridge.slurm.files import write_atomically

    if leave_out and output is None:
        msg = "--leave-out-unhealthy needs --output: the prolog maps indices by the file written"
        raise click.UsageError(msg)
    conf, _nodes = asyncio.run(
        _gres(config_path, agent, node_name, healthy=leave_out, written=output)
    )
    text = "".join(f"{line}\n" for line in conf)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        write_atomically(output, "# written by 'accelkit slurm gres-conf'\n" + text)
    except OSError as exc:
        msg = f"cannot write {output}: {exc.strerror or exc}"
        raise click.ClickException(msg) from None


@slurm.command("node-line")
@config_option
@click.option("--agent", default=None, help="Only this agent's NodeName (default: every agent).")
@node_name_option
@LEAVE_OUT
def node_line_cmd(
    config_path: Path | None, agent: str | None, node_name: str | None, leave_out: bool
) -> None:
    """Print the NodeName line(s) with the Gres= value for slurm.conf (one per agent)."""
    _conf, nodes = asyncio.run(_gres(config_path, agent, node_name, healthy=leave_out))
    for line in nodes:
        click.echo(line)


async def _prolog(config_path: Path | None, agent: str | None) -> None:
    from accelkit.bridge.slurm.job_hooks import prolog
    from accelkit.node import Node

    config = read_config(config_path)
    async with Node.open(config) as node:
        agent_id = _agents(list(node.agents), agent, one=True)[0]
        await prolog(node, agent_id, _settings(config), dict(os.environ))


#: seconds the epilog waits for the job's processes to go after SIGKILL
KILL_WAIT = 10.0


def _kill_leftovers(state_dir: Path, job_id: str) -> None:
    """Kill the job's processes still on the node; an error, keeping the booking, for any
    that outlive SIGKILL (a process stuck in the kernel)."""
    from accelkit.bridge.slurm.job_env import env_file
    from accelkit.bridge.slurm.task_views import kept_files
    from accelkit.errors import InvalidResourceArgument
    from accelkit.runtime.slurm_jobs import job_processes, kill_processes

    try:
        files = kept_files(env_file(state_dir, job_id).read_text(encoding="utf-8"))
    except OSError:
        files = []
    left = kill_processes(job_processes(job_id, files), KILL_WAIT)
    if left:
        pids = ", ".join(map(str, left))
        msg = (
            f"job {job_id}: processes {pids} still live after SIGKILL; its devices stay booked "
            "until they are gone (the next epilog run or reconciliation frees them)"
        )
        raise InvalidResourceArgument(msg)


async def _epilog(config_path: Path | None) -> None:
    from accelkit.bridge.slurm.job_env import job_id_of
    from accelkit.bridge.slurm.job_hooks import epilog
    from accelkit.node import Node
    from accelkit.runtime.registry import default_runtimes
    from accelkit.runtime.slurm_jobs import SlurmJobsRuntime

    config = read_config(config_path)
    job_id = job_id_of(os.environ)
    _kill_leftovers(Path(config.resource.state_dir), job_id)
    runtimes = default_runtimes()
    runtimes[SlurmJobsRuntime.name] = SlurmJobsRuntime(ended=frozenset({job_id}))
    try:
        async with Node.open(config, runtimes=runtimes) as node:
            await epilog(node, os.environ)
    finally:
        for runtime in runtimes.values():
            await runtime.close()


@slurm.command("prolog")
@config_option
@click.option("--agent", default=None, help=AGENT_HELP)
def prolog_cmd(config_path: Path | None, agent: str | None) -> None:
    """For Prolog=: book the job's accelkit GRES as workload slurm:KEY and run pre_create.

    KEY is SLURM_JOB_SLUID where Slurm sets it, else the job id (its StartTime recorded). The
    indices come from SLURM_JOB_GPUS (gpu) or 'scontrol show job -d' (other names); a job
    with no accelkit GRES passes through. A device that is unhealthy or cordoned fails the
    prolog and drains the node with the reason. On failure nothing stays booked and the exit
    status is non-zero, so Slurm drains the node and requeues the job.
    """
    asyncio.run(_prolog(config_path, agent))


def _task_script(config_path: Path | None) -> str:
    from accelkit.bridge.slurm.task_script import script

    config = read_config(config_path)
    settings = _settings(config)
    return script(str(config.resource.state_dir), settings.scontrol)


@slurm.command("task-prolog-script")
@config_option
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    callback=given_path,
    default=None,
    help="Write the script to this file (atomically, executable) instead of printing it.",
)
def task_prolog_script_cmd(config_path: Path | None, output: Path | None) -> None:
    """Print the sh script for TaskProlog= (no Python start before each task).

    It exports the plugins' variables for the devices Slurm bound to the task and step
    (SLURM_STEP_GPUS, Slurm's GPU_DEVICE_ORDINAL or CUDA_VISIBLE_DEVICES; for other GRES
    'scontrol show step -d') and unsets those of the job's other devices.
    """
    from accelkit.bridge.slurm.files import write_atomically

    text = _task_script(config_path)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        write_atomically(output, text, mode=0o755)
    except OSError as exc:
        msg = f"cannot write {output}: {exc.strerror or exc}"
        raise click.ClickException(msg) from None


@slurm.command("prolog-script")
@config_option
@click.option("--agent", default=None, help=AGENT_HELP)
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    callback=given_path,
    default=None,
    help="Write the script to this file (atomically, executable) instead of printing it.",
)
def prolog_script_cmd(config_path: Path | None, agent: str | None, output: Path | None) -> None:
    """Print the sh script for Prolog=: 'accelkit serve' books the job when it answers.

    With [bridge.slurm] serve-prologs = true, a running 'accelkit serve' answers on
    <state-dir>/slurm/prolog.sock and no Python starts for the job: the script posts the
    job's environment there with curl. Where no serve answers (or curl is missing) it runs
    'accelkit slurm prolog' with the same --config and --agent.
    """
    import shutil
    import sys

    from accelkit.bridge.slurm.files import write_atomically
    from accelkit.bridge.slurm.prolog_server import client_script

    if config_path is None:
        msg = "--config is needed: the script runs the prolog with that config"
        raise click.UsageError(msg)
    config = read_config(config_path)
    if agent is not None:  # the prolog it runs would refuse it for every job
        _agents(list(config.agent_ids), agent, one=True)
    ran = Path(sys.argv[0]) if sys.argv[0] else None
    found = str(ran.resolve()) if ran is not None and ran.name == "accelkit" else None
    accelkit = found or shutil.which("accelkit") or "accelkit"  # not python -m's __main__.py
    text = client_script(
        str(config.resource.state_dir), accelkit, str(config_path.resolve()), agent
    )
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        write_atomically(output, text, mode=0o755)
    except OSError as exc:
        msg = f"cannot write {output}: {exc.strerror or exc}"
        raise click.ClickException(msg) from None


@slurm.command("task-prolog")
@config_option
def task_prolog_cmd(config_path: Path | None) -> None:
    """For TaskProlog=: run the task-prolog-script (export/unset lines for the task's devices)."""
    text = _task_script(config_path)
    os.execv("/bin/sh", ["sh", "-c", text, "accelkit-task-prolog"])  # noqa: S606 (no shell)


@slurm.command("epilog")
@config_option
def epilog_cmd(config_path: Path | None) -> None:
    """For Epilog=: kill the job's processes left on the node, run its teardown and free its
    devices (again: nothing to do). Processes that outlive SIGKILL keep the devices booked."""
    asyncio.run(_epilog(config_path))
