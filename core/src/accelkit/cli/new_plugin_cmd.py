"""``accelkit new-plugin``: scaffold a plugin distribution that passes the conformance kit."""

from __future__ import annotations

from pathlib import Path

import click

from accelkit.cli.options import given_path
from accelkit.cli.scaffold import PluginScaffold, write_scaffold


@click.command("new-plugin")
@click.argument("name")
@click.option(
    "--output",
    type=click.Path(file_okay=False),
    callback=given_path,
    default=".",
    show_default="the current directory",
    help="Directory to create the distribution accelkit-NAME in.",
)
def new_plugin(name: str, output: Path) -> None:
    """Create accelkit-NAME: a plugin for devices called NAME, with tests and fake hardware.

    The distribution has the entry point, a plugin and its hook, a fake device tree for tests,
    a conformance test and a fake-hardware test; it passes the conformance kit as generated.
    """
    scaffold = PluginScaffold.named(name)
    target = write_scaffold(scaffold, output)
    click.echo(f"created {target}")
    click.echo(f'next: pip install -e "{target}[test]" && pytest {target}')
