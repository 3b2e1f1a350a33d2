"""Options, loading steps and operator warnings shared by several commands."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
from collections.abc import Awaitable, Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

import click

from accelkit.config import HostConfig, load_host_config
from accelkit.config.rules import MAX_SECONDS
from accelkit.config.search import find_host_config
from accelkit.types import AgentId


def _config_path(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Path | None:
    """``--config`` as a path; an empty one is refused (it would name the working directory)."""
    if value is None:
        return None
    if not value.strip():
        msg = "empty path: name a host config file, or leave --config out"
        raise click.BadParameter(msg)
    return Path(value)


config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    callback=_config_path,
    default=None,
    help=(
        "Host config (TOML). Without it: $ACCELKIT_CONFIG, else /etc/accelkit/host.toml, "
        "else the installed plugins with defaults."
    ),
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def given_path(
    _ctx: click.Context | None, param: click.Parameter | None, value: str | None
) -> Path | None:
    """A path option (a callback; its type a ``click.Path`` without ``path_type``, which
    would read an empty value as the working directory): an empty path is refused."""
    if value is None:
        return None
    if not value.strip():
        msg = "empty path: name a file or directory, or leave the option out"
        raise click.BadParameter(msg, param=param)
    return Path(value)


#: a duration as a person types it: ASCII digits with an optional fraction (as in the config)
_SECONDS_TEXT = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)


class Seconds(click.ParamType[float, Any]):
    """Seconds on the command line, by the config's rule for durations (``30``, ``2.5``):
    ASCII digits with an optional fraction, no sign, exponent, unit, ``nan`` or ``inf``; above
    0 (or 0 too, with ``zero``) and at most a day."""

    name = "seconds"

    def __init__(self, *, zero: bool = False) -> None:
        self.zero = zero

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):  # a default
            return float(value)
        text = str(value)
        if not _SECONDS_TEXT.fullmatch(text):
            self.fail(f"expected a number of seconds such as 30 or 2.5, got {text!r}", param, ctx)
        seconds = Decimal(text)
        low = "0 or more" if self.zero else "above 0"
        if seconds > MAX_SECONDS or (seconds == 0 and not self.zero):
            self.fail(f"expected seconds {low} and at most 86400, got {text!r}", param, ctx)
        return float(seconds)


#: a whole number as a person types it: ASCII digits, an optional sign (``int()`` also reads
#: full-width and other Unicode digits, and ``1_000``)
_WHOLE_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)


class Whole(click.IntRange):
    """A whole number in ASCII digits, within the range given as for ``click.IntRange``."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not _WHOLE_TEXT.fullmatch(value.strip()):
            self.fail(f"expected a whole number in ASCII digits, got {value!r}", param, ctx)
        return super().convert(value, param, ctx)


def read_config(config_path: Path | None) -> HostConfig:
    """The host config from ``--config``, else ``ACCELKIT_CONFIG``, else the system config,
    else the defaults (:func:`accelkit.config.search.find_host_config`)."""
    path = find_host_config(config_path).checked()
    return HostConfig() if path is None else load_host_config(path)


def pick_agent(agent: str | None, agents: Iterable[str]) -> AgentId:
    """``--agent``, or the node's only agent when it was left out.

    Raises ``click.UsageError`` naming the agents when the node has several.
    """
    known = sorted(agents)
    if agent is not None:
        return AgentId(agent)
    if len(known) == 1:
        return AgentId(known[0])
    msg = f"the node has {len(known)} agents ({', '.join(known) or 'none'}): pick one with --agent"
    raise click.UsageError(msg)


async def until_signalled(serve: Awaitable[None]) -> None:
    """Await ``serve`` until it ends or SIGTERM or SIGINT cancels it (the bridges' main loop)."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await serve


#: warnings already printed by this process: each is said once, however often a node is opened
_said: set[str] = set()


def echo_warnings(lines: Iterable[str]) -> None:
    """Print each line as ``warning: ...`` on stderr, once per process.

    Commands call it with the loader's warnings (``loader.warnings``: plugin names that match
    no installed plugin, plugins written for a newer plugin API), so every command tells the
    operator what ``accelkit check`` would, while ``--json`` output on stdout stays clean.
    """
    for line in lines:
        if line not in _said:
            _said.add(line)
            click.echo(f"warning: {line}", err=True)
