"""``--help`` tells the truth: every command and subcommand answers it as a real process (even
with a broken config in the environment, which help never reads), and its text lists every
option, argument and subcommand the command has."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from accelkit.cli.app import cli
from accelkit.testing.cli_runner import cli_env

ACCELKIT = [sys.executable, "-c", "from accelkit.cli.app import run; run()"]


def _commands() -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command as its words (``("slurm", "prolog")``), the group's own included."""
    found: list[tuple[tuple[str, ...], click.Command]] = []

    def walk(words: tuple[str, ...], command: click.Command, parent: click.Context | None) -> None:
        ctx = click.Context(command, info_name=words[-1] if words else "accelkit", parent=parent)
        found.append((words, command))
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                walk((*words, name), sub, ctx)

    walk((), cli, None)
    return found


COMMANDS = _commands()


def _help(words: tuple[str, ...], tmp_path) -> subprocess.CompletedProcess[str]:
    broken = tmp_path / "broken.toml"
    broken.write_text("[resource\n")
    env = cli_env()
    env |= {"ACCELKIT_CONFIG": str(broken), "ACCELKIT_STATE_DIR": "", "COLUMNS": "100"}
    return subprocess.run(
        [*ACCELKIT, *words, "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def test_every_command_is_walked():
    names = {" ".join(words) for words, _ in COMMANDS}
    assert {"", "run", "slurm", "slurm prolog", "slurm epilog", "dra-driver"} <= names
    assert len(COMMANDS) >= 25


@pytest.mark.parametrize(
    ("words", "command"), COMMANDS, ids=[" ".join(w) or "accelkit" for w, _ in COMMANDS]
)
def test_help_runs_and_lists_what_the_command_takes(words, command, tmp_path):
    done = _help(words, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    text = done.stdout
    assert text.startswith(f"Usage: {' '.join(('accelkit', *words))} ")
    usage = text.splitlines()[0]
    ctx = click.Context(command, info_name=words[-1] if words else "accelkit")
    for param in command.get_params(ctx):
        if isinstance(param, click.Argument):
            assert param.make_metavar(ctx) in usage, (param.name, usage)
        elif not param.hidden:
            for opt in (*param.opts, *param.secondary_opts):
                assert opt in text, (opt, text)
    if command.help:
        first = " ".join(command.help.split("\n\n")[0].split())[:40]
        assert first in " ".join(text.split()), first
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            assert f"\n  {name} " in text, name
