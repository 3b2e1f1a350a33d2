"""Options and loading steps shared by several commands."""

from __future__ import annotations

from pathlib import Path

import click

from accelkit.config import HostConfig, load_host_config

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Host config (TOML). Without it: the installed plugins with defaults.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def read_config(config_path: Path | None) -> HostConfig:
    """The host config from ``--config``, or the defaults."""
    return HostConfig() if config_path is None else load_host_config(config_path)
