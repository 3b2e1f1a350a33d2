"""The ``accelkit`` command group and its error handling.

Every error reaches the user as ``error: …`` on stderr with exit status 2; a traceback is shown
only with ``--verbose``.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Sequence

import click

from accelkit import __version__
from accelkit.errors import AccelkitError

EXIT_ERROR = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="accelkit")
@click.option("-v", "--verbose", is_flag=True, help="Log plugin loading and show tracebacks.")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """Inspect and use the compute plugins of this node."""
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose
    logging.basicConfig(
        level=logging.INFO if verbose else logging.ERROR,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _register_commands() -> None:
    from accelkit.cli.cdi_cmd import cdi
    from accelkit.cli.check_cmd import check
    from accelkit.cli.devices_cmd import devices
    from accelkit.cli.metrics_cmd import metrics
    from accelkit.cli.plan_cmd import plan
    from accelkit.cli.plugins_cmd import plugins
    from accelkit.cli.run_cmd import run
    from accelkit.cli.serve_metrics_cmd import serve_metrics

    for command in (plugins, devices, plan, check, metrics, serve_metrics, run, cdi):
        cli.add_command(command)


_register_commands()


def main(argv: Sequence[str] | None = None) -> int:  # noqa: PLR0911 - a status per failure kind
    """Run the command; return its exit status instead of letting exceptions escape."""
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "-v" in args or "--verbose" in args
    try:
        result = cli.main(args=args, prog_name="accelkit", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("error: aborted", err=True)
        return EXIT_ERROR
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            click.echo(f"see '{exc.ctx.command_path} --help'", err=True)
        return EXIT_ERROR
    except AccelkitError as exc:
        if verbose:
            traceback.print_exc()
        click.echo(f"error: {exc}", err=True)
        return EXIT_ERROR
    except KeyboardInterrupt:
        click.echo("error: interrupted", err=True)
        return 130
    except Exception as exc:  # a bug: say so plainly, keep the traceback for --verbose
        if verbose:
            traceback.print_exc()
        click.echo(f"error: internal error: {type(exc).__name__}: {exc}", err=True)
        click.echo("run with --verbose for the traceback", err=True)
        return EXIT_ERROR
    return result if isinstance(result, int) else 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
