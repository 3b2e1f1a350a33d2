"""The ``accelkit`` command group and its error handling.

Every error reaches the user as ``error: …`` on stderr with exit status 2 (125 for ``run``,
whose statuses are its workload's: a command's ``failure_status``); a traceback is shown only
with ``--verbose``.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import os
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import click

from accelkit.errors import AccelkitError

EXIT_ERROR = 2


#: command name -> "module:attribute"; a command's module is imported only when it runs. The
#: bridges' commands (k8s-device-plugin, dra-driver, slurm, and those of installed
#: distributions) come from the ``accelkit_bridges`` hook (:mod:`accelkit.cli.bridges`).
COMMANDS = {
    "plugins": "accelkit.cli.plugins_cmd:plugins",
    "devices": "accelkit.cli.devices_cmd:devices",
    "plan": "accelkit.cli.plan_cmd:plan",
    "check": "accelkit.cli.check_cmd:check",
    "metrics": "accelkit.cli.metrics_cmd:metrics",
    "serve-metrics": "accelkit.cli.serve_metrics_cmd:serve_metrics",
    "serve": "accelkit.cli.serve_cmd:serve",
    "repartition": "accelkit.cli.repartition_cmd:repartition",
    "run": "accelkit.cli.run_cmd:run",
    "status": "accelkit.cli.status_cmd:status",
    "release": "accelkit.cli.release_cmd:release",
    "cdi": "accelkit.cli.cdi_cmd:cdi",
    "cordon": "accelkit.cli.cordon_cmd:cordon",
    "uncordon": "accelkit.cli.cordon_cmd:uncordon",
    "new-plugin": "accelkit.cli.new_plugin_cmd:new_plugin",
}


#: whether :func:`run` paused the cyclic garbage collector for the process's start-up
_collector_paused = False


def _resume_collector() -> None:
    """End the start-up pause of :func:`run`: what the imports made is frozen (long-lived module
    objects the collector would only traverse again and again) and the collector runs again, for
    as long as the command runs (a workload's lifetime, for ``run``)."""
    global _collector_paused  # noqa: PLW0603 - the one switch of the process's start-up
    if _collector_paused:
        _collector_paused = False
        gc.freeze()
        gc.enable()


class LazyGroup(click.Group):
    """A group whose commands are imported on first use, so start-up stays fast; the bridges'
    commands are those registered (accelkit's own found without importing any distribution)."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """The subcommand; its ``failure_status`` (if any) is what its errors exit with."""
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(ctx.obj, dict):
            ctx.obj["failure_status"] = getattr(command, "failure_status", EXIT_ERROR)
        return name, command, rest

    def list_commands(self, ctx: click.Context) -> list[str]:
        from accelkit.cli.bridges import registered_bridges

        bridges = registered_bridges(reserved=self.lazy_commands)
        return sorted({*super().list_commands(ctx), *self.lazy_commands, *bridges})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return super().get_command(ctx, cmd_name)
        try:
            found = self._import_command(cmd_name)
        finally:
            _resume_collector()
        if found is None:
            return None
        what, command = found
        if not isinstance(command, click.Command):
            msg = f"{what} is not a click command ({command!r})"
            raise TypeError(msg)
        self.add_command(command, cmd_name)
        return command

    def _import_command(self, cmd_name: str) -> tuple[str, object] | None:
        """Where ``cmd_name`` comes from and what it gave: one of accelkit's commands, a
        built-in bridge (found without importing any distribution), a bridge an installed
        distribution registers, or ``None``."""
        if (path := self.lazy_commands.get(cmd_name)) is not None:
            module_name, attribute = path.split(":")
            return path, getattr(importlib.import_module(module_name), attribute)
        from accelkit.cli.bridges import builtin_bridges, registered_bridges

        bridge = builtin_bridges().get(cmd_name) or registered_bridges(
            reserved=self.lazy_commands
        ).get(cmd_name)
        if bridge is None:
            return None
        return f"bridge {cmd_name!r} ({bridge.__name__})", bridge.command()


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="accelkit", prog_name="accelkit")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Log plugin loading and show tracebacks; twice (-v -v) also trace every hook call.",
)
@click.pass_context
def cli(ctx: click.Context, verbose: int) -> None:
    """Inspect and use the compute plugins of this node."""
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose > 0
    logging.basicConfig(
        level=logging.INFO if verbose else logging.ERROR,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if verbose > 1:  # pluggy's tracing of each hook call, result and exception
        logging.getLogger("accelkit.hooks").setLevel(logging.DEBUG)


def main(argv: Sequence[str] | None = None) -> int:  # noqa: PLR0911 - a status per failure kind
    """Run the command; return its exit status instead of letting exceptions escape."""
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "-v" in args or "--verbose" in args
    state: dict[str, Any] = {}
    try:
        result = cli.main(args=args, prog_name="accelkit", standalone_mode=False, obj=state)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("error: aborted", err=True)
        return int(state.get("failure_status", EXIT_ERROR))
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            click.echo(f"see '{exc.ctx.command_path} --help'", err=True)
        return int(state.get("failure_status", EXIT_ERROR))
    except AccelkitError as exc:
        if verbose:
            traceback.print_exc()
        click.echo(f"error: {exc}", err=True)
        return int(state.get("failure_status", EXIT_ERROR))
    except KeyboardInterrupt:
        click.echo("error: interrupted", err=True)
        return 130
    except Exception as exc:  # a bug: say so plainly, keep the traceback for --verbose
        if verbose:
            traceback.print_exc()
        click.echo(f"error: internal error: {type(exc).__name__}: {exc}", err=True)
        click.echo("run with --verbose for the traceback", err=True)
        return int(state.get("failure_status", EXIT_ERROR))
    return result if isinstance(result, int) else 0


#: seconds the exit waits for threads that are not daemons before it ends the process anyway
EXIT_GRACE = 3.0


def _bound_the_exit(status: int) -> None:
    """End the process ``EXIT_GRACE`` seconds into its exit, even where a plugin left a thread
    running.

    The interpreter's exit waits for every thread that is not a daemon; one a plugin started
    and never ends would hold the process forever, its command done. Threads that end as the
    exit begins, and the exit's atexit handlers, are kept as they are; past the grace the
    streams are flushed and the process ends with the command's status.
    """
    main_thread = threading.main_thread()
    if all(t is main_thread or t.daemon for t in threading.enumerate()):
        return

    def end() -> None:
        threading.Event().wait(EXIT_GRACE)
        left = [t.name for t in threading.enumerate() if t is not main_thread and not t.daemon]
        logging.getLogger(__name__).info("ending with threads still running: %s", left)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed or broken pipe: nothing more to say
                stream.flush()
        os._exit(status)

    threading.Thread(target=end, name="accelkit-exit", daemon=True).start()


def run() -> None:
    """Console-script entry point."""
    # Importing a command's modules makes tens of thousands of objects that live as long as the
    # process; the collector would pass over them some ninety times while they are made (about
    # a tenth of a short command's time). It is paused until the command's module is imported.
    global _collector_paused  # noqa: PLW0603 - the one switch of the process's start-up
    if gc.isenabled():
        gc.disable()
        _collector_paused = True
    try:
        status = main()
    finally:
        _resume_collector()
    # The process ends now: the interpreter's last collection passes would traverse every
    # object left (each module's classes and functions), about 20 ms of every command, only to
    # find nothing to free early. Frozen objects are skipped; the exit itself is unchanged
    # (atexit handlers, threads joined, streams flushed, modules torn down), but for a
    # thread that outlives EXIT_GRACE.
    gc.freeze()
    _bound_the_exit(status)
    sys.exit(status)
