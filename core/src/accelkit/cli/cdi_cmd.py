"""``accelkit cdi``: the CDI spec of an agent's devices, printed or written to a directory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path
from typing import Any

import click

from accelkit.cli.options import (
    config_option,
    echo_warnings,
    given_path,
    pick_agent,
    read_config,
)
from accelkit.errors import UnknownAgent
from accelkit.host import PartitionHost
from accelkit.runtime.render.cdi import cdi_kind_problem
from accelkit.workload.cdi_spec import agent_cdi_spec, default_cdi_kind


async def _spec(config_path: Path | None, chosen: str | None, kind: str | None) -> dict[str, Any]:
    config = read_config(config_path)
    async with PartitionHost.open(config) as host:
        echo_warnings(host.loader.warnings)
        agent = pick_agent(chosen, host.agents)
        view = UnknownAgent.look_up(host.agents, agent)
        return await agent_cdi_spec(view.agent_id, view.contexts, kind or default_cdi_kind(agent))


def _write(directory: Path, spec: dict[str, Any], *, replace: bool) -> Path:
    """Write ``<vendor>-<class>.json`` atomically (temp file, fsync, rename).

    The directory is created when missing, its parent never (a mistyped path does not grow a
    tree of directories). A directory that cannot be created or written to is a
    :class:`click.ClickException` naming the path; no temp file is left behind. A file already
    there with other contents (another agent's spec under the same kind, or this agent's before
    its devices changed) is replaced only with ``replace``.
    """
    vendor, _, klass = spec["kind"].partition("/")
    path = directory / f"{vendor}-{klass}.json"
    try:
        directory.mkdir(exist_ok=True)
    except FileNotFoundError as exc:
        msg = (
            f"cannot create the directory {str(directory)!r}: its parent"
            f" {str(directory.parent)!r} does not exist"
        )
        raise click.ClickException(msg) from exc
    except FileExistsError as exc:  # a file (or a link to nothing) where the directory goes
        msg = f"{str(directory)!r} is not a directory (--output names the directory of specs)"
        raise click.ClickException(msg) from exc
    except OSError as exc:
        msg = f"cannot create the directory {str(directory)!r}: {_reason(exc)}"
        raise click.ClickException(msg) from exc
    if not replace and path.is_file() and _read_json(path) != spec:
        msg = f"{str(path)!r} already holds another spec of kind {spec['kind']!r}; pass --replace"
        raise click.ClickException(msg)
    temp = directory / f".{path.name}.tmp-{os.getpid()}"
    try:
        with temp.open("w", encoding="utf-8") as stream:
            json.dump(spec, stream, indent=2)
            stream.write("\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            temp.unlink()
        if isinstance(exc, OSError):
            msg = f"cannot write {str(path)!r}: {_reason(exc)}"
            raise click.ClickException(msg) from exc
        raise
    return path


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _check_kind(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None and (problem := cdi_kind_problem(value)) is not None:
        raise click.BadParameter(problem)
    return value


@click.command()
@config_option
@click.option(
    "--agent",
    "agent",
    default=None,
    help="The agent whose devices to describe (default: the only one).",
)
@click.option(
    "--output",
    "output",
    type=click.Path(file_okay=False),
    callback=given_path,
    default=None,
    help="Write <vendor>-<class>.json into this directory (e.g. /etc/cdi) instead of printing.",
)
@click.option(
    "--kind",
    "kind",
    default=None,
    callback=_check_kind,
    help="CDI kind, vendor.com/class (default: accelkit.io/<agent>).",
)
@click.option(
    "--replace",
    is_flag=True,
    help="With --output, replace a spec file of the same kind that holds other contents.",
)
def cdi(
    config_path: Path | None,
    agent: str | None,
    output: Path | None,
    kind: str | None,
    replace: bool,
) -> None:
    """Print (or write) the CDI spec of an agent's devices, at the lowest cdiVersion it needs."""
    if replace and output is None:
        msg = "--replace needs --output: it replaces a spec file in that directory"
        raise click.UsageError(msg)
    spec = asyncio.run(_spec(config_path, agent, kind))
    if output is None:
        click.echo(json.dumps(spec, indent=2))
        return
    click.echo(str(_write(output, spec, replace=replace)))
